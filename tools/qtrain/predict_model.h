// A Dettmers-style performance model of one synchronous data-parallel training step: from the per-phase
// times measured on a few ranks and the bytes the gradient exchange moves, predict the time per step on
// p replicas over a network of bandwidth B and per-message latency alpha, and the speedup over one
// replica. Pure arithmetic (no I/O), so that every formula can be checked by hand in tests.
//
// Derivation (one step; every rank does the same work at the same time):
//
//   compute   c = data + forward + backward + optimizer, measured per step. Each replica keeps its
//             batch size (weak scaling), so c does not depend on p.
//
//   traffic   per bucket, for one replica's payload of b bytes (fp32 / fp16 values, or the encoded
//             payload of a quantizer), with the standard bandwidth-optimal ring / pairwise algorithms:
//               ring allreduce (fp32, fp16):          2(p-1)/p * b / B  +  2(p-1) * alpha
//               allgather of payloads (dettmers8):      (p-1)  * b / B  +   (p-1) * alpha
//               reduce-scatter + allgather (qsgd,     2(p-1)/p * b / B  +  2(p-1) * alpha
//                 onebit, adaptive): each rank sends p-1 stripes of b/p to their owners, then the
//                 owners' re-encoded stripes (b/p each) are allgathered.
//             Allreduce moves the same bytes as reduce-scatter + allgather; allgather moves p/2 times
//             more, so allgather only pays off for payloads much smaller than fp32 and few ranks.
//
//   encode / decode   proportional to the values they touch, with one cost per value u_e and u_d
//             fitted to the measured run (taken at p_run ranks):
//               allgather:                  encode n values, decode p payloads of n values
//               reduce-scatter + allgather: encode n (p stripes) + n/p (the owner's re-encode),
//                                           decode n (p stripes of n/p) + n (every owner's stripe)
//               allreduce (p > 1):          pack n values to the wire type, unpack n
//             so  encode(p) = u_e * (n_ag + n_rs (1 + 1/p) + n_ar)  and
//                 decode(p) = u_d * (n_ag p + 2 n_rs + n_ar),
//             and u_e, u_d are the measured encode and decode times divided by the same sums at p_run.
//             (In a world of one fp32 allreduce is skipped: n_ar counts only 16-bit values there.)
//
//   overlap   buckets become ready during backward in order; bucket k is ready once backward has
//             produced its values, at  r_k = backward * (share of values in buckets 0..k). One
//             exchange thread processes buckets in order:  s_k = max(r_k, e_{k-1}),
//             e_k = s_k + encode_k + comm_k + decode_k. What the loop waits for after backward is
//             exposed = max(0, e_last - backward); the rest is hidden. Without overlap every bucket
//             starts after backward: exposed = the sum of all exchange times.
//
//   step time   t(p) = c + exposed(p);   one replica needs no exchange: t(1) = c;
//   speedup     S(p) = p * t(1) / t(p)   (samples per second of p replicas over one replica's).
//
// Quantization pays off against fp32 at (p, B) when its encode + decode cost is smaller than the
// communication it saves (after overlap); compare_methods() reports where that stops being true.
//
// Nodes of several ranks (Topology: N nodes of G ranks, p = N G). Each node has one network link of
// bandwidth B (per direction) that its G ranks share, and a faster link inside (B_i per rank and
// direction, latency alpha_i: NVLink, PCIe or shared memory). The slow link bounds every transfer
// that crosses it; transfers inside a node run beside it and are left out of the flat algorithms.
//   flat, ranks in node order (what qtrain's collectives send):
//     ring allreduce: one ring stream crosses each node's link: 2(p-1)/p * b / B + 2(p-1) alpha
//     allgather (direct sends): each rank's payload to the p - G ranks of other nodes:
//                               G (p-G) * b / B + (p-1) alpha
//     reduce-scatter + allgather (direct sends of stripes b/p, then of the owners' stripes):
//                               2 G (N-1)/N * b / B + 2(p-1) alpha
//     (G = 1 gives the formulas above; N = 1 is one node: the formulas above with p = G, B_i, alpha_i.)
//   two levels (exchange/hierarchical_exchange.h), after backward, without overlap:
//     intra sum: a reduce-scatter of the node's n values at the intra precision (w = 4 or 2 bytes),
//            each stripe to its owner:  (G-1)/G * n w / B_i + (G-1) alpha_i
//     inter: local rank l sends stripe l (b/G) with the bucket's algorithm over the N nodes; the G
//            stripes share the link, so it carries the flat N-rank traffic of the whole bucket:
//                               communicate(b, N nodes of 1) with B, alpha
//     intra allgather of the stripes in fp32: (G-1)/G * 4 n / B_i + (G-1) alpha_i
//     encode / decode: of a stripe (n/G values) on N ranks, with the fitted per-value costs.
//
// Schedules (sync_schedule.h). Everything above is one exchange of the whole model, once per step
// (every_step). DeMo is the same with its own payload: one allgather bucket of the codec's payload
// after backward (no overlap), whose encode and decode are a DCT of every value whatever p
// (Bucket::transform_values). DiLoCo with H inner steps and F fragments exchanges fragment f's
// pseudo-gradient once per H steps, at its own step (diloco.h): F exchanges per period, each of 1/F
// of every bucket (values and bytes; each keeps its latency terms), after the optimizer step, so
// never under backward. On the exchange's thread one exchange takes
//               x = sum over the fragment's buckets of encode + communicate + decode,
//   with overlap tau it runs while the next tau inner steps compute, and the loop waits for the rest:
//               exposed per exchange = max(0, x - tau c)        (tau = 0: x)
//   per step    exposed = F / H * max(0, x - tau c),   and encode, communicate, decode F / H x theirs.
// The measured run's encode and decode are per exchange of the whole model (its time over its
// exchanges / F), so the per-value costs fit any schedule alike.
#pragma once

#include <string>
#include <vector>

#include "tools/qtrain/sync_schedule.h"

namespace qtrain::predict {

// One bucket of the gradient exchange, in the order backward makes buckets ready.
struct Bucket {
  double values = 0;  // gradient values in the bucket (its share of backward)
  // Bytes of one replica's payload, by reduction algorithm.
  double allreduce_bytes = 0;  // native fp32 / fp16 / bf16 values
  double allgather_bytes = 0;  // encoded payloads exchanged by allgather
  double rsag_bytes = 0;       // encoded payloads exchanged by reduce-scatter + allgather
  // Values, by algorithm (for the encode / decode cost).
  double allreduce_values = 0, allreduce_16bit_values = 0, allgather_values = 0, rsag_values = 0;
  // Values encoded and decoded once per exchange whatever the world size (DeMo's DCT each way).
  double transform_values = 0;
};

// What one run measured, per step.
struct StepProfile {
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  // Per exchange of the whole model (per step for every_step), on the exchange thread.
  double encode_s = 0, decode_s = 0;
  int measured_ranks = 1;  // the world size of the measured run
  bool overlap = true;     // buckets exchanged under backward (every_step with communication.overlap)
  cli::SyncSchedule schedule;
  std::vector<Bucket> buckets;
  double compute_s() const { return data_s + forward_s + backward_s + optimizer_s; }
};

struct Network {
  double bandwidth_bytes_per_s = 125e6;        // per link and direction (1 Gbit/s = 125e6 B/s); per node's link
  double latency_s = 5e-6;                     // per message
  double intra_bandwidth_bytes_per_s = 100e9;  // inside a node, per rank and direction
  double intra_latency_s = 2e-6;
};

// N nodes of G ranks each (ranks numbered node by node).
struct Topology {
  int nodes = 1, ranks_per_node = 1;
  int ranks() const { return nodes * ranks_per_node; }
};

enum class Hierarchy { flat, two_level };

// The three parts of one bucket's two-level exchange (communication time only).
struct TwoLevelTimes {
  double intra_sum_s = 0, inter_s = 0, intra_gather_s = 0;
  double total() const { return intra_sum_s + inter_s + intra_gather_s; }
};

struct StepPrediction {
  int ranks = 1;
  double compute_s = 0;
  double encode_s = 0, communicate_s = 0, decode_s = 0;  // per step: summed over buckets, x F / H for DiLoCo
  double exchange_s = 0;  // one exchange on the exchange's thread (a fragment's under DiLoCo)
  double exposed_s = 0;   // per step, what the loop waits for (after backward, or after the optimizer step)
  double step_s = 0;      // compute + exposed
  double speedup = 1;     // p * t(1) / t(p)
};

// Communication time of one bucket's payloads on p ranks (0 for p == 1), one rank per node.
double communicate_time(const Bucket& b, int ranks, const Network& net);
// The same, flat, on nodes of several ranks that share their node's link.
double communicate_time(const Bucket& b, const Topology& topology, const Network& net);
// One bucket through the two levels; `intra_bytes_per_value` 4 (fp32) or 2 (bf16).
TwoLevelTimes two_level_time(const Bucket& b, const Topology& topology, const Network& net,
                             double intra_bytes_per_value);
// A bucket's share for one local rank: values and bytes divided by G (its stripe).
Bucket stripe_of(const Bucket& b, int ranks_per_node);
// Encode / decode time of one bucket on p ranks with per-value costs u_e, u_d.
double encode_time(const Bucket& b, int ranks, double u_encode);
double decode_time(const Bucket& b, int ranks, double u_decode);
// The per-value costs fitted to the measured run (0 when it encoded nothing).
double fitted_encode_cost(const StepProfile& profile);
double fitted_decode_cost(const StepProfile& profile);

StepPrediction predict_step(const StepProfile& profile, int ranks, const Network& net);
// On nodes of several ranks, flat or in two levels (intra_bytes_per_value: 4 fp32, 2 bf16). Two
// levels on one node or one rank per node is the flat exchange (as comm/ runs it).
StepPrediction predict_step(const StepProfile& profile, const Topology& topology, const Network& net,
                            Hierarchy hierarchy, double intra_bytes_per_value = 4);

// Parses "1gbit", "10Gbit", "100mbit", "25gbps" (bits) or "1GB/s" (bytes) to bytes per second, and
// "5us", "1ms", "0", "2e-6s" to seconds. Throw InputError naming `what`.
double parse_bandwidth(const std::string& text, const std::string& what);
// The largest per-message latency accepted (seconds).
constexpr double kMaxLatencySeconds = 10;
double parse_latency(const std::string& text, const std::string& what);
std::string format_bandwidth(double bytes_per_s);

}  // namespace qtrain::predict
