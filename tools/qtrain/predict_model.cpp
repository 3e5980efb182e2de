// The step-time model of predict_model.h (the formulas are derived there).
#include "tools/qtrain/predict_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "exchange/gradient_exchange.h"
#include "framework/core/check.h"

namespace qtrain::predict {
namespace {

// Values weighted by how often encode touches them on p ranks (see the header).
double encode_weight(const Bucket& b, int p) {
  const double native = p > 1 ? b.allreduce_values : b.allreduce_16bit_values;
  return b.allgather_values + b.rsag_values * (1.0 + 1.0 / p) + native + b.transform_values;
}
double decode_weight(const Bucket& b, int p) {
  const double native = p > 1 ? b.allreduce_values : b.allreduce_16bit_values;
  return b.allgather_values * p + 2.0 * b.rsag_values + native + b.transform_values;
}

double parse_number_with_unit(const std::string& text, const std::string& what, std::string& unit) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || !(v >= 0) || !std::isfinite(v))
    input_error("{}: '{}' does not start with a finite non-negative number", what, text);
  unit = end;
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v;
}

}  // namespace

double communicate_time(const Bucket& b, int ranks, const Network& net) {
  if (ranks <= 1) return 0;
  const double p = ranks, B = net.bandwidth_bytes_per_s, a = net.latency_s;
  // Each pattern's bytes on one rank's link are the exchange's own count (WireCost::sent_per_rank);
  // its latency terms: 2 (p - 1) hops of a ring, p - 1 of an allgather.
  double t = 0;
  using Pattern = WireCost::Pattern;
  if (b.allreduce_bytes > 0)
    t += WireCost{.pattern = Pattern::allreduce, .bytes = b.allreduce_bytes}.sent_per_rank(ranks) / B + 2 * (p - 1) * a;
  if (b.allgather_bytes > 0)
    t += WireCost{.pattern = Pattern::allgather, .bytes = b.allgather_bytes}.sent_per_rank(ranks) / B + (p - 1) * a;
  if (b.rsag_bytes > 0)
    t += WireCost{.pattern = Pattern::reduce_scatter_allgather, .bytes = b.rsag_bytes}.sent_per_rank(ranks) / B +
         2 * (p - 1) * a;
  return t;
}

double communicate_time(const Bucket& b, const Topology& topology, const Network& net) {
  const int N = topology.nodes, G = topology.ranks_per_node;
  if (G == 1) return communicate_time(b, N, net);
  if (N == 1) return communicate_time(b, G, {net.intra_bandwidth_bytes_per_s, net.intra_latency_s});
  const double p = topology.ranks(), B = net.bandwidth_bytes_per_s, a = net.latency_s;
  double t = 0;
  if (b.allreduce_bytes > 0) t += 2 * (p - 1) / p * b.allreduce_bytes / B + 2 * (p - 1) * a;
  if (b.allgather_bytes > 0) t += G * (p - G) * b.allgather_bytes / B + (p - 1) * a;
  if (b.rsag_bytes > 0) t += 2.0 * G * (N - 1) / N * b.rsag_bytes / B + 2 * (p - 1) * a;
  return t;
}

TwoLevelTimes two_level_time(const Bucket& b, const Topology& topology, const Network& net,
                             double intra_bytes_per_value) {
  TwoLevelTimes t;
  const double G = topology.ranks_per_node, Bi = net.intra_bandwidth_bytes_per_s, ai = net.intra_latency_s;
  if (topology.ranks_per_node > 1) {
    t.intra_sum_s = (G - 1) / G * b.values * intra_bytes_per_value / Bi + (G - 1) * ai;
    t.intra_gather_s = (G - 1) / G * b.values * 4 / Bi + (G - 1) * ai;
  }
  t.inter_s = communicate_time(b, topology.nodes, net);
  return t;
}

Bucket stripe_of(const Bucket& b, int ranks_per_node) {
  const double g = ranks_per_node;
  Bucket s = b;
  for (double* v : {&s.values, &s.allreduce_bytes, &s.allgather_bytes, &s.rsag_bytes, &s.allreduce_values,
                    &s.allreduce_16bit_values, &s.allgather_values, &s.rsag_values, &s.transform_values})
    *v /= g;
  return s;
}

double encode_time(const Bucket& b, int ranks, double u_encode) { return u_encode * encode_weight(b, ranks); }
double decode_time(const Bucket& b, int ranks, double u_decode) { return u_decode * decode_weight(b, ranks); }

double fitted_encode_cost(const StepProfile& profile) {
  double w = 0;
  for (const Bucket& b : profile.buckets) w += encode_weight(b, profile.measured_ranks);
  return w > 0 ? profile.encode_s / w : 0.0;
}

double fitted_decode_cost(const StepProfile& profile) {
  double w = 0;
  for (const Bucket& b : profile.buckets) w += decode_weight(b, profile.measured_ranks);
  return w > 0 ? profile.decode_s / w : 0.0;
}

StepPrediction predict_step(const StepProfile& profile, int ranks, const Network& net) {
  return predict_step(profile, Topology{ranks, 1}, net, Hierarchy::flat);
}

StepPrediction predict_step(const StepProfile& profile, const Topology& topology, const Network& net,
                            Hierarchy hierarchy, double intra_bytes_per_value) {
  const int ranks = topology.ranks();
  QT_CHECK(topology.nodes >= 1 && topology.ranks_per_node >= 1, "predict_step: {} node(s) of {} rank(s)",
           topology.nodes, topology.ranks_per_node);
  const bool two_levels = hierarchy == Hierarchy::two_level && topology.nodes > 1 && topology.ranks_per_node > 1;
  StepPrediction r;
  r.ranks = ranks;
  r.compute_s = profile.compute_s();
  if (ranks == 1) {  // one replica exchanges nothing
    r.step_s = r.compute_s;
    r.speedup = 1;
    return r;
  }
  const double ue = fitted_encode_cost(profile), ud = fitted_decode_cost(profile);
  const cli::SyncSchedule& schedule = profile.schedule;
  const bool periodic = schedule.type == cli::SyncSchedule::Type::diloco;
  // DiLoCo exchanges one fragment at a time: 1/F of every bucket (the header's "Schedules").
  const int fragments = periodic ? static_cast<int>(schedule.fragments) : 1;
  double total_values = 0;
  for (const Bucket& b : profile.buckets) total_values += b.values;
  double ready_values = 0, end = 0, serial = 0;
  for (const Bucket& whole : profile.buckets) {
    const Bucket b = fragments > 1 ? stripe_of(whole, fragments) : whole;
    ready_values += whole.values;
    double enc = 0, comm = 0, dec = 0;
    if (two_levels) {
      const Bucket stripe = stripe_of(b, topology.ranks_per_node);
      enc = encode_time(stripe, topology.nodes, ue);
      dec = decode_time(stripe, topology.nodes, ud);
      comm = two_level_time(b, topology, net, intra_bytes_per_value).total();
    } else {
      enc = encode_time(b, ranks, ue);
      dec = decode_time(b, ranks, ud);
      comm = communicate_time(b, topology, net);
    }
    r.encode_s += enc;
    r.communicate_s += comm;
    r.decode_s += dec;
    serial += enc + comm + dec;
    const double ready = total_values > 0 ? profile.backward_s * ready_values / total_values : profile.backward_s;
    end = std::max(ready, end) + enc + comm + dec;
  }
  r.exchange_s = serial;
  if (periodic) {
    // F exchanges per H steps, each hidden behind up to tau inner steps of compute.
    const double per_step = schedule.exchanges_per_step();
    const double hidden = static_cast<double>(schedule.overlap) * r.compute_s;
    r.exposed_s = per_step * std::max(0.0, serial - hidden);
    r.encode_s *= per_step;
    r.communicate_s *= per_step;
    r.decode_s *= per_step;
  } else {
    // The two levels start once backward has produced every gradient (the node's sum needs them all).
    r.exposed_s = profile.overlap && !two_levels ? std::max(0.0, end - profile.backward_s) : serial;
  }
  r.step_s = r.compute_s + r.exposed_s;
  r.speedup = r.step_s > 0 ? ranks * r.compute_s / r.step_s : 0;
  return r;
}

double parse_bandwidth(const std::string& text, const std::string& what) {
  std::string unit;
  const double v = parse_number_with_unit(text, what, unit);
  double bytes = 0;  // per unit
  if (unit == "bit" || unit == "bps")
    bytes = 1.0 / 8;
  else if (unit == "kbit" || unit == "kbps")
    bytes = 1e3 / 8;
  else if (unit == "mbit" || unit == "mbps")
    bytes = 1e6 / 8;
  else if (unit == "gbit" || unit == "gbps")
    bytes = 1e9 / 8;
  else if (unit == "tbit" || unit == "tbps")
    bytes = 1e12 / 8;
  else if (unit == "b/s")
    bytes = 1;
  else if (unit == "mb/s")
    bytes = 1e6;
  else if (unit == "gb/s")
    bytes = 1e9;
  else
    input_error(
        "{}: unknown bandwidth unit in '{}'; use e.g. 100mbit, 1gbit, 10gbit (bits per second) or 12GB/s (bytes)", what,
        text);
  // Also for the byte units (0GB/s would divide by zero).
  if (v <= 0 || !std::isfinite(v * bytes))
    input_error("{}: the bandwidth must be > 0 and finite, got '{}'", what, text);
  return v * bytes;
}

double parse_latency(const std::string& text, const std::string& what) {
  std::string unit;
  const double v = parse_number_with_unit(text, what, unit);
  double seconds = 0;
  if (unit == "s")
    seconds = v;
  else if (unit == "ms")
    seconds = v * 1e-3;
  else if (unit == "us")
    seconds = v * 1e-6;
  else if (unit == "ns")
    seconds = v * 1e-9;
  else if (!(unit.empty() && v == 0))
    input_error("{}: unknown latency unit in '{}'; use e.g. 5us, 0.5ms, 0", what, text);
  // A message latency is microseconds to milliseconds; beyond seconds every prediction is meaningless
  // (and 1e308s overflows the step time to inf).
  if (!(seconds >= 0 && seconds <= kMaxLatencySeconds))
    input_error("{}: a per-message latency must be between 0 and {:g}s, got '{}'", what, kMaxLatencySeconds, text);
  return seconds;
}

std::string format_bandwidth(double bytes_per_s) {
  const double bits = bytes_per_s * 8;
  if (bits >= 1e9) return fmt::format("{:g} Gbit/s", bits / 1e9);
  if (bits >= 1e6) return fmt::format("{:g} Mbit/s", bits / 1e6);
  return fmt::format("{:g} GB/s", bytes_per_s / 1e9);
}

}  // namespace qtrain::predict
