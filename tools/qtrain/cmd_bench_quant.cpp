// `qtrain bench-quant`: encode and decode throughput of every quantizer over a sweep of sizes, next
// to a memcpy measured in the same run (single thread and all threads; on a GPU, next to a
// device-to-device copy), with compression and error on gradient-like data. Each configuration is
// validated (decode(encode(x)) within the method's bound, at every value up to 1M and at a sample
// above) before it is timed. --profile-once runs each method's CUDA kernels once, for ncu.
// docs/performance.md holds the figures and the command.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "comm/buffer_ops.h"
#include "framework/core/check.h"
#include "framework/core/config_node.h"
#include "framework/core/context.h"
#include "framework/core/device.h"
#include "framework/core/philox.h"
#include "framework/core/pinned_buffer.h"
#include "framework/core/tensor.h"
#include "framework/core/memory_budget.h"
#include "quant/deferred_checks.h"
#include "quant/method.h"
#include "quant/policy.h"
#include "quant/quantizer.h"
#include "quant/wire.h"
#include "tools/qtrain/commands.h"
#include "tools/qtrain/method_list.h"

namespace qtrain::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The variants of every payload quantizer (powersgd, which the gradient exchange runs as its own
// algorithm, has no encode or decode to time here: bench-allreduce times it).
std::string payload_variant_list() {
  std::string list;
  for (const QuantMethodInfo* m : quant_methods())
    if (m->payload)
      for (const std::string& v : m->variants) list += (list.empty() ? "" : ",") + v;
  return list;
}

struct Options {
  std::string methods = payload_variant_list();
  std::string sizes = "64K,1M,16M,64M";
  std::string threads = "1,all";
  int repeat = 5;
  int64_t column = 1024;
  std::string device = "auto";
  std::string json;
  uint64_t seed = 1;
  bool profile_once = false;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  double mult = 1;
  if (unit == "K" || unit == "k")
    mult = 1024;
  else if (unit == "M" || unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty())
    input_error("--sizes: '{}' is not a count like 65536, 64K or 16M", s);
  const auto n = static_cast<int64_t>(v * mult);
  if (n < 1 || n > wire::kMaxValues) input_error("--sizes: {} must be in [1, {}]", s, wire::kMaxValues);
  return n;
}

std::string size_str(int64_t n) {
  if (n % (1024 * 1024) == 0) return fmt::format("{}M", n / (1024 * 1024));
  if (n % 1024 == 0) return fmt::format("{}K", n / 1024);
  return std::to_string(n);
}

// Runs fn(chunk) once for every chunk in [0, chunks), on all cores (chunks in any order, each on one
// thread). The host-side work around the timed regions (the data, the round-trip checks, the errors)
// runs on every core: serial, it was most of what a size cost outside its timed region.
void for_each_chunk(int64_t chunks, const std::function<void(int64_t)>& fn) {
  const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t c = next++; c < chunks; c = next++) fn(c);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

// Values per chunk of the parallel host passes: fixed (not per core), so that the errors' partial sums,
// added in chunk order, are the same on every machine.
constexpr int64_t kChunk = int64_t{1} << 20;

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// Gradient-like data without zeros: N(0, 1e-2^2), and Student's t with 2 degrees of freedom (heavy
// tails; closed-form inverse CDF). Each pair of values is a function of its index alone, so the chunks
// fill in parallel with the same values.
void fill_data(std::vector<float>& normal, std::vector<float>& heavy, int64_t n, uint64_t seed) {
  normal.resize(static_cast<size_t>(n));
  heavy.resize(static_cast<size_t>(n));
  const PhiloxKey key = derive_philox_key(seed, 0x62656e6368ull);
  for_each_chunk(chunks_of(n), [&](int64_t c) {
    for (int64_t j = c * kChunk; j < std::min(n, (c + 1) * kChunk); j += 2) {  // kChunk is even: pairs stay whole
      const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32), 0, 0, key);
      const double u1 = uniform_from_bits(b.v[0]), u2 = uniform_from_bits(b.v[1]);
      const double r = std::sqrt(-2.0 * std::log(u1)) * 1e-2;
      for (int64_t t = 0; t < 2 && j + t < n; ++t) {
        float z = static_cast<float>(t ? r * std::sin(6.283185307179586 * u2) : r * std::cos(6.283185307179586 * u2));
        normal[static_cast<size_t>(j + t)] = z != 0.0f ? z : 1e-9f;
        const double u = uniform_from_bits(b.v[2 + t]) * 0.999999 + 5e-7;
        float h = static_cast<float>(1e-3 * (2 * u - 1) / std::sqrt(2 * u * (1 - u)));
        heavy[static_cast<size_t>(j + t)] = h != 0.0f ? h : 1e-12f;
      }
    }
  });
}

// U(0, 1] (never zero), the uniform data of Dettmers' Table 2: its own Philox stream (counter word 2 =
// 1), each value a function of its index alone, like fill_data's.
void fill_uniform(std::vector<float>& uniform, int64_t n, uint64_t seed) {
  uniform.resize(static_cast<size_t>(n));
  const PhiloxKey key = derive_philox_key(seed, 0x62656e6368ull);
  for_each_chunk(chunks_of(n), [&](int64_t c) {
    for (int64_t j = c * kChunk; j < std::min(n, (c + 1) * kChunk); j += 4) {  // kChunk is a multiple of 4
      const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32), 1, 0, key);
      for (int64_t t = 0; t < 4 && j + t < n; ++t) uniform[static_cast<size_t>(j + t)] = uniform_from_bits(b.v[t]);
    }
  });
}

// T threads (the caller is thread 0) that run one function together per round, between barriers, so
// that short runs are not dominated by thread start-up.
class Team {
 public:
  explicit Team(int threads) : threads_(threads), start_(threads), done_(threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { loop(t); });
  }
  ~Team() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& w : workers_) w.join();
  }
  int size() const { return threads_; }
  // Runs job(t) on every thread; returns the wall time in seconds.
  double run(const std::function<void(int)>& job) {
    job_ = &job;
    const auto t0 = Clock::now();
    start_.arrive_and_wait();
    (*job_)(0);
    done_.arrive_and_wait();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  void loop(int t) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      (*job_)(t);
      done_.arrive_and_wait();
    }
  }
  int threads_;
  std::barrier<> start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  bool stop_ = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Thread t's share [begin, end) of n values, cut at multiples of `align` (column or bucket).
std::pair<int64_t, int64_t> share(int64_t n, int t, int threads, int64_t align) {
  const int64_t units = n / align;
  const int64_t b = units * t / threads * align, e = t + 1 == threads ? n : units * (t + 1) / threads * align;
  return {b, e};
}

struct Errors {
  double mre = 0, rel_l2 = 0;
};

// Over every value, in parallel: per-chunk sums added in chunk order.
Errors errors_of(const std::vector<float>& x, const std::vector<float>& y) {
  const auto n = static_cast<int64_t>(x.size());
  struct Sums {
    double rel = 0, num = 0, den = 0;
  };
  std::vector<Sums> part(static_cast<size_t>(chunks_of(n)));
  for_each_chunk(chunks_of(n), [&](int64_t c) {
    Sums s;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
      const double d = static_cast<double>(y[static_cast<size_t>(i)]) - x[static_cast<size_t>(i)];
      s.rel += std::fabs(d) / std::fabs(static_cast<double>(x[static_cast<size_t>(i)]));
      s.num += d * d;
      s.den += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
    }
    part[static_cast<size_t>(c)] = s;
  });
  Sums t;
  for (const Sums& s : part) t.rel += s.rel, t.num += s.num, t.den += s.den;
  return {t.rel / static_cast<double>(n), std::sqrt(t.num / t.den)};
}

double max_abs_of(const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<double> part(static_cast<size_t>(chunks_of(n)));
  for_each_chunk(chunks_of(n), [&](int64_t c) {
    double m = 0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i)
      m = std::max(m, static_cast<double>(std::fabs(x[static_cast<size_t>(i)])));
    part[static_cast<size_t>(c)] = m;
  });
  return part.empty() ? 0 : *std::max_element(part.begin(), part.end());
}

// The values a round trip is checked at: all of them up to kCheckAll; beyond, the first and the last
// kCheckEdge (where a span's partial buckets, blocks and words are) and every stride-th one between,
// the stride odd so that the sample passes through every offset of the power-of-two buckets, blocks
// and words. The descriptor's rule costs about 100 ns per value (it looks the spec's parameters up by
// name on each call): over all 16M values about 1.6 s per method and input, 6.4 s at 64M, most of what
// bench-quant spent outside its timed region (about 2.5 s per method on the H100). The sample, about
// 1.1M values spread over every core, keeps what the check is for (a broken scale, sign or tail shows
// in thousands of values); that every value of the CUDA path equals the CPU's is the `cuda` tests' job
// (test_quant_cuda), not this benchmark's.
constexpr int64_t kCheckAll = int64_t{1} << 20, kCheckEdge = int64_t{1} << 16;

struct Sample {
  int64_t edge = 0, stride = 1;  // [0, edge), every stride-th of [edge, n - edge), [n - edge, n)
};

Sample sample_of(int64_t n) {
  if (n <= kCheckAll) return {n, 1};
  return {kCheckEdge, (n / kCheckAll) | 1};
}

// decode(encode(x)) within the method's bound (its descriptor's rule) at the sample's values, in
// parallel; throws naming the first violation. max_abs: the largest |x| of all of x.
void validate_round_trip(const QuantSpec& s, const std::vector<float>& x, double max_abs,
                         const std::vector<uint8_t>& payload, const std::vector<float>& y) {
  const QuantMethodInfo& info = method_info(s.method);
  const auto n = static_cast<int64_t>(x.size());
  const Sample sm = sample_of(n);
  // The sample as index ranges with a step: the edges whole, the middle strided.
  struct Range {
    int64_t begin, end, step;
  };
  std::vector<Range> ranges;
  constexpr int64_t kPerRange = int64_t{1} << 14;  // values checked per range: enough ranges for every core
  auto add = [&](int64_t b, int64_t e, int64_t step) {
    for (; b < e; b += kPerRange * step) ranges.push_back({b, std::min(e, b + kPerRange * step), step});
  };
  add(0, std::min(n, sm.edge), 1);
  if (sm.edge < n) {
    add(sm.edge, n - sm.edge, sm.stride);
    add(std::max(sm.edge, n - sm.edge), n, 1);
  }
  std::vector<int64_t> first_bad(ranges.size(), -1);
  for_each_chunk(static_cast<int64_t>(ranges.size()), [&](int64_t r) {
    RoundTripValue v;
    v.payload = payload;
    v.max_abs = max_abs;
    const Range& range = ranges[static_cast<size_t>(r)];
    for (int64_t i = range.begin; i < range.end; i += range.step) {
      v.x = x[static_cast<size_t>(i)];
      v.y = y[static_cast<size_t>(i)];
      v.index = static_cast<size_t>(i);
      if (!info.within_bound(s, v)) {
        first_bad[static_cast<size_t>(r)] = i;
        return;
      }
    }
  });
  for (int64_t i : first_bad)  // ranges in index order: the first one found is the lowest index
    if (i >= 0)
      input_error("bench-quant: {} round trip out of bound at value {}: {} -> {}", s.str(), i,
                  x[static_cast<size_t>(i)], y[static_cast<size_t>(i)]);
}

struct Row {
  std::string device, method, size;
  int threads = 1;
  double encode_gbs = 0, decode_gbs = 0, copy_gbs = 0;
  double bits_per_value = 0, traffic = 0, floor_ratio = 0;
  Errors normal, heavy;
  Errors uniform;  // CPU rows only (the errors table and its paper comparison are the CPU's)
};

// Bytes moved per value by encode + decode at their minimum: the fp32 input (and the residual read
// and written with error feedback), the payload written then read, the fp32 output written.
double traffic_per_value(const QuantSpec& s, double payload_per_value) {
  return 4 + (s.error_feedback ? 8 : 0) + 2 * payload_per_value + 4;
}

// One memcpy of the span (per-thread shares), in seconds.
double copy_once(Team& team, const float* src, float* dst, int64_t n) {
  return team.run([&](int k) {
    auto [b, e] = share(n, k, team.size(), 16);
    std::memcpy(dst + b, src + b, 4 * static_cast<size_t>(e - b));
  });
}

void bench_cpu(const Options& o, const std::vector<QuantSpec>& specs, const std::vector<int64_t>& sizes,
               const std::vector<int>& thread_counts, std::vector<Row>& rows) {
  for (int64_t n : sizes) {
    // What this size allocates, checked first: a size beyond the machine's memory would otherwise end
    // in std::bad_alloc, or in the OOM killer after minutes of filling it.
    MemoryFootprint f;
    f.items.push_back({"normal, heavy-tailed and uniform data", 12 * n});
    f.items.push_back({"decoded output and memcpy target", 8 * n});
    f.items.push_back({"payloads and residuals (at most)", 12 * n});
    check_memory_fits(f, available_memory(Device::cpu()), 1, Device::cpu(),
                      fmt::format("bench-quant --sizes {}", size_str(n)));
    std::vector<float> normal, heavy, uniform;
    fill_data(normal, heavy, n, o.seed);
    fill_uniform(uniform, n, o.seed);
    const double max_normal = max_abs_of(normal), max_heavy = max_abs_of(heavy), max_uniform = max_abs_of(uniform);
    std::vector<float> out(static_cast<size_t>(n));
    std::vector<float> copy_dst(static_cast<size_t>(n));
    for (int threads : thread_counts) {
      Team team(threads);
      double checks_s = 0;  // the untimed host-side checks, summed over the methods
      const auto size_start = Clock::now();
      fmt::print("\n{} values ({} MB fp32), {} thread{}\n", size_str(n), 4 * n / 1000000, threads,
                 threads > 1 ? "s" : "");
      fmt::print("{:<40} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>7}\n", "method", "enc GB/s", "dec GB/s", "bits/v",
                 "ratio", "traffic", "memcpy", "floor");
      for (const QuantSpec& spec : specs) {
        auto q = make_quantizer(spec);
        // One quantizer call per thread on its share, as a communicator would quantize buckets.
        // Shares are whole columns (and whole 64-value buckets), so every call sees the column length.
        const int64_t align = std::lcm<int64_t>(o.column, 64);
        std::vector<QuantState> states;
        std::vector<std::vector<uint8_t>> payloads(static_cast<size_t>(threads));
        std::vector<size_t> bytes(static_cast<size_t>(threads));
        for (int t = 0; t < threads; ++t) {
          states.emplace_back(o.seed, 0, static_cast<uint64_t>(t));
          auto [b, e] = share(n, t, threads, align);
          payloads[static_cast<size_t>(t)].resize(q->max_encoded_bytes(e - b, o.column));
        }
        std::vector<Context> contexts;
        for (int t = 0; t < threads; ++t) contexts.push_back(Context::cpu(o.seed, 1));
        auto encode_all = [&](const std::vector<float>& x) {
          return team.run([&](int t) {
            auto [b, e] = share(n, t, threads, align);
            auto& p = payloads[static_cast<size_t>(t)];
            bytes[static_cast<size_t>(t)] = q->encode(contexts[static_cast<size_t>(t)],
                                                      std::span<const float>(x.data() + b, static_cast<size_t>(e - b)),
                                                      o.column, states[static_cast<size_t>(t)], p);
          });
        };
        auto decode_all = [&](std::vector<float>& y) {
          return team.run([&](int t) {
            auto [b, e] = share(n, t, threads, align);
            q->decode(contexts[static_cast<size_t>(t)],
                      std::span<const uint8_t>(payloads[static_cast<size_t>(t)].data(), bytes[static_cast<size_t>(t)]),
                      e - b, std::span<float>(y.data() + b, static_cast<size_t>(e - b)));
          });
        };
        Row row;
        row.device = "cpu";
        row.method = spec.str();
        row.size = size_str(n);
        row.threads = threads;
        // Validate, and measure the errors of one step from a zero residual, before any timing.
        for (auto [data, max, errors] :
             {std::tuple{&normal, max_normal, &row.normal}, std::tuple{&heavy, max_heavy, &row.heavy},
              std::tuple{&uniform, max_uniform, &row.uniform}}) {
          for (auto& st : states) st.reset();
          encode_all(*data);
          decode_all(out);
          const auto t_checks = Clock::now();
          if (threads == 1) validate_round_trip(spec, *data, max, payloads[0], out);
          *errors = errors_of(*data, out);
          checks_s += std::chrono::duration<double>(Clock::now() - t_checks).count();
        }
        // memcpy, encode and decode take turns, so that whatever else runs on the machine weighs on
        // the copy that sets the floor as much as on the quantizer.
        std::vector<double> te, td, tc;
        for (int r = 0; r < o.repeat + 1; ++r) {
          const double c = copy_once(team, normal.data(), copy_dst.data(), n);
          const double e = encode_all(normal);
          const double d = decode_all(out);
          if (r > 0) te.push_back(e), td.push_back(d), tc.push_back(c);
        }
        size_t total = 0;
        for (size_t b : bytes) total += b;
        const double enc = median(te), dec = median(td);
        const double copy = 8.0 * static_cast<double>(n) / median(tc) / 1e9;  // read + write
        row.copy_gbs = copy;
        row.encode_gbs = 4.0 * static_cast<double>(n) / enc / 1e9;
        row.decode_gbs = 4.0 * static_cast<double>(n) / dec / 1e9;
        row.bits_per_value = 8.0 * static_cast<double>(total) / static_cast<double>(n);
        row.traffic = traffic_per_value(spec, static_cast<double>(total) / static_cast<double>(n));
        row.floor_ratio = row.traffic * static_cast<double>(n) / (copy * 1e9) / (enc + dec);
        fmt::print("{:<40} {:>9.2f} {:>9.2f} {:>7.2f} {:>6.1f}x {:>8.1f}B {:>9.1f} {:>6.0f}%\n", row.method,
                   row.encode_gbs, row.decode_gbs, row.bits_per_value, 32.0 / row.bits_per_value, row.traffic,
                   row.copy_gbs, 100 * row.floor_ratio);
        rows.push_back(row);
      }
      fmt::print("{} methods at {} in {:.1f} s, of which host checks of the round trips {:.1f} s\n", specs.size(),
                 size_str(n), std::chrono::duration<double>(Clock::now() - size_start).count(), checks_s);
    }
  }
}

// --profile-once: one encode and one decode of every method on the normal data and nothing else, for a
// kernel profiler. Nsight Compute replays each kernel it profiles, so the timing loop and the checks
// would multiply its minutes (tools/gpu_check.sh runs this under ncu). The host cannot know how many
// kernels a quantizer launches, so one launch of the exchange's scale kernel on a single value (times
// 1) goes before each encode and each decode: tools/gpu_check/ncu_table.py cuts the profiler's list of
// kernels at these marks and names the parts after the "profile-once method:" lines, in their order.
void profile_once(const Options& o, Context& ctx, const std::vector<QuantSpec>& specs, int64_t n) {
  const Device dev = Device::cuda(0);
  std::vector<float> normal, heavy;
  fill_data(normal, heavy, n, o.seed);
  Tensor gx = Tensor::empty({n}, DType::f32, dev), gy = Tensor::empty({n}, DType::f32, dev);
  device_copy(dev, gx.raw(), Device::cpu(), normal.data(), 4 * static_cast<size_t>(n));
  Tensor mark = Tensor::zeros({1}, DType::f32, dev);
  size_t cap = 1;
  for (const QuantSpec& spec : specs) cap = std::max(cap, make_quantizer(spec)->max_encoded_bytes(n, o.column));
  Tensor payload = Tensor::empty({static_cast<int64_t>(cap)}, DType::u8, dev);
  fmt::print("\n{} values on {}: one encode and one decode per method, each after a mark (scale_kernel on one value)\n",
             size_str(n), dev.str());
  for (const QuantSpec& spec : specs) {
    auto q = make_quantizer(spec);
    QuantState st(o.seed, 0, 0);
    fmt::print("profile-once method: {}\n", spec.str());
    std::fflush(stdout);
    scale_buffer(ctx, mark.data<float>(), 1, 1.0f);
    const size_t bytes = q->encode(ctx, std::span<const float>(gx.data<float>(), static_cast<size_t>(n)), o.column, st,
                                   std::span<uint8_t>(payload.data<uint8_t>(), cap));
    scale_buffer(ctx, mark.data<float>(), 1, 1.0f);
    q->decode(ctx, std::span<const uint8_t>(payload.data<uint8_t>(), bytes), n,
              std::span<float>(gy.data<float>(), static_cast<size_t>(n)));
    ctx.synchronize();
  }
}

void bench_cuda(const Options& o, const std::vector<QuantSpec>& specs, const std::vector<int64_t>& sizes,
                std::vector<Row>& rows) {
  Context ctx = Context::cuda(0, o.seed);
  const Device dev = Device::cuda(0);
  for (int64_t n : sizes) {
    if (o.profile_once) {
      profile_once(o, ctx, specs, n);
      continue;
    }
    const auto size_start = Clock::now();
    std::vector<float> normal, heavy;
    fill_data(normal, heavy, n, o.seed);
    const double max_normal = max_abs_of(normal);
    Tensor gx = Tensor::empty({n}, DType::f32, dev), gh = Tensor::empty({n}, DType::f32, dev);
    Tensor gy = Tensor::empty({n}, DType::f32, dev);
    device_copy(dev, gx.raw(), Device::cpu(), normal.data(), 4 * static_cast<size_t>(n));
    device_copy(dev, gh.raw(), Device::cpu(), heavy.data(), 4 * static_cast<size_t>(n));
    // Every timed figure on the GPU is the throughput of `repeat` calls queued back to back on the
    // context's stream, then one wait: what the device sustains while the host queues the next call,
    // as the exchange calls the codecs (under DeferredChecks: no call waits for its status). One
    // call's latency (launch and wait included) would measure the host at these sizes: at 16M values
    // an fp8 encode's kernels take about 60 us, a launch and a wait about 20.
    DeferredChecks checks(ctx);
    auto per_call = [&](const std::function<void()>& call) {
      {
        const DeferredChecks::Scope scope(checks);
        call();  // warm-up
      }
      checks.settle();
      ctx.synchronize();
      const auto t0 = Clock::now();
      {
        const DeferredChecks::Scope scope(checks);
        for (int r = 0; r < o.repeat; ++r) call();
      }
      checks.settle();
      ctx.synchronize();
      return std::chrono::duration<double>(Clock::now() - t0).count() / o.repeat;
    };
    const double copy_s = per_call([&] { copy_async(ctx, gy.raw(), gx.raw(), 4 * static_cast<size_t>(n)); });
    const double copy = 8.0 * static_cast<double>(n) / copy_s / 1e9;
    fmt::print("\n{} values on {}: device-to-device copy {:.1f} GB/s (read + write)\n", size_str(n), dev.str(), copy);
    fmt::print("{:<40} {:>9} {:>9} {:>7} {:>7} {:>9} {:>7}\n", "method", "enc GB/s", "dec GB/s", "bits/v", "ratio",
               "traffic", "floor");
    // What every method of this size uses, made once: the payload at the largest bound of the methods
    // (a cudaMalloc and a cudaFree per method would each synchronize the device), the host copies of a
    // round trip.
    size_t cap = 1;
    for (const QuantSpec& spec : specs) cap = std::max(cap, make_quantizer(spec)->max_encoded_bytes(n, o.column));
    Tensor payload = Tensor::empty({static_cast<int64_t>(cap)}, DType::u8, dev);
    std::vector<float> y(static_cast<size_t>(n));
    std::vector<uint8_t> host_payload;
    // Where the untimed time goes, summed over the methods: making the quantizer, the first encode and
    // decode of both inputs with the decoded values' copy back, and the host-side checks of the round
    // trip (the sampled bound check and the errors over every value, on all cores).
    double setup_s = 0, first_s = 0, checks_s = 0;
    const double data_s = std::chrono::duration<double>(Clock::now() - size_start).count();
    for (const QuantSpec& spec : specs) {
      auto t_phase = Clock::now();
      auto q = make_quantizer(spec);
      const int64_t column = o.column;
      QuantState st(o.seed, 0, 0);
      size_t bytes = 0;
      auto encode = [&](const Tensor& x) {
        const auto t0 = Clock::now();
        bytes = q->encode(ctx, std::span<const float>(x.data<float>(), static_cast<size_t>(n)), column, st,
                          std::span<uint8_t>(payload.data<uint8_t>(), cap));
        ctx.synchronize();
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      auto decode = [&] {
        const auto t0 = Clock::now();
        q->decode(ctx, std::span<const uint8_t>(payload.data<uint8_t>(), bytes), n,
                  std::span<float>(gy.data<float>(), static_cast<size_t>(n)));
        ctx.synchronize();
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      Row row;
      row.device = dev.str();
      row.method = spec.str();
      row.size = size_str(n);
      row.copy_gbs = copy;
      setup_s += std::chrono::duration<double>(Clock::now() - t_phase).count();
      for (const Tensor* x : {&gx, &gh}) {
        t_phase = Clock::now();
        st.reset();
        encode(*x);
        decode();
        device_copy(Device::cpu(), y.data(), dev, gy.raw(), 4 * static_cast<size_t>(n));
        first_s += std::chrono::duration<double>(Clock::now() - t_phase).count();
        t_phase = Clock::now();
        const auto& host = x == &gx ? normal : heavy;
        if (x == &gx) {
          host_payload.resize(bytes);
          device_copy(Device::cpu(), host_payload.data(), dev, payload.raw(), bytes);
          validate_round_trip(spec, host, max_normal, host_payload, y);
        }
        (x == &gx ? row.normal : row.heavy) = errors_of(host, y);
        checks_s += std::chrono::duration<double>(Clock::now() - t_phase).count();
      }
      // The last encode's size is what the timed decodes read (adaptive's varies from call to call).
      const double enc = per_call([&] {
        bytes = q->encode(ctx, std::span<const float>(gx.data<float>(), static_cast<size_t>(n)), column, st,
                          std::span<uint8_t>(payload.data<uint8_t>(), cap));
      });
      // The decoder told the sender's column: its header is checked on the device, as in the exchange.
      const double dec = per_call([&] {
        q->decode(ctx, std::span<const uint8_t>(payload.data<uint8_t>(), bytes), n,
                  std::span<float>(gy.data<float>(), static_cast<size_t>(n)), column);
      });
      row.encode_gbs = 4.0 * static_cast<double>(n) / enc / 1e9;
      row.decode_gbs = 4.0 * static_cast<double>(n) / dec / 1e9;
      row.bits_per_value = 8.0 * static_cast<double>(bytes) / static_cast<double>(n);
      row.traffic = traffic_per_value(spec, static_cast<double>(bytes) / static_cast<double>(n));
      row.floor_ratio = row.traffic * static_cast<double>(n) / (copy * 1e9) / (enc + dec);
      fmt::print("{:<40} {:>9.2f} {:>9.2f} {:>7.2f} {:>6.1f}x {:>8.1f}B {:>6.0f}%\n", row.method, row.encode_gbs,
                 row.decode_gbs, row.bits_per_value, 32.0 / row.bits_per_value, row.traffic, 100 * row.floor_ratio);
      rows.push_back(row);
    }
    fmt::print(
        "{} methods at {} in {:.1f} s; untimed: the data and its upload {:.1f} s, making quantizers {:.1f} s, first "
        "encodes and decodes with their copies back {:.1f} s, host checks {:.1f} s\n",
        specs.size(), size_str(n), std::chrono::duration<double>(Clock::now() - size_start).count(), data_s, setup_s,
        first_s, checks_s);
  }
}

void print_errors(const std::vector<Row>& rows) {
  fmt::print(
      "\nErrors of one step (zero residual), normal N(0, 0.01^2), Student-t(2) and uniform U(0, 1] data. MRE =\n"
      "mean of |decoded - x| / |x|, relL2 = ||decoded - x|| / ||x||. Methods that do not keep small values\n"
      "(onebit, 2-bit qsgd, the sparse ones) have an MRE dominated by the smallest |x|; compare them by relL2.\n"
      "Dettmers' Table 2 is the MRE of uniform and normal data (scale-free for dettmers8).\n");
  fmt::print("{:<8} {:<40} {:>6} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "size", "method", "bits/v", "ratio",
             "MRE normal", "relL2 norm", "MRE heavy", "relL2 heavy", "MRE unif");
  for (const Row& r : rows) {
    if (r.threads != 1 || r.device != "cpu") continue;
    auto pct = [](double x) { return x < 10 ? fmt::format("{:.3f}%", 100 * x) : fmt::format("{:.1e}%", 100 * x); };
    fmt::print("{:<8} {:<40} {:>6.2f} {:>6.1f}x {:>11} {:>11} {:>11} {:>11} {:>11}\n", r.size, r.method,
               r.bits_per_value, 32.0 / r.bits_per_value, pct(r.normal.mre), pct(r.normal.rel_l2), pct(r.heavy.mre),
               pct(r.heavy.rel_l2), pct(r.uniform.mre));
  }
}

void write_json(const std::string& file, const std::vector<Row>& rows) {
  std::ofstream out(file);
  if (!out) input_error("--json {}: cannot write", file);
  out << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << fmt::format(
        "  {{\"device\": \"{}\", \"method\": \"{}\", \"size\": \"{}\", \"threads\": {}, \"encode_gbs\": {:.4f}, "
        "\"decode_gbs\": {:.4f}, \"copy_gbs\": {:.4f}, \"bits_per_value\": {:.4f}, \"traffic_bytes_per_value\": "
        "{:.3f}, "
        "\"floor_ratio\": {:.4f}, \"mre_normal\": {:.6g}, \"rel_l2_normal\": {:.6g}, \"mre_heavy\": {:.6g}, "
        "\"rel_l2_heavy\": {:.6g}, \"mre_uniform\": {}}}{}\n",
        r.device, r.method, r.size, r.threads, r.encode_gbs, r.decode_gbs, r.copy_gbs, r.bits_per_value, r.traffic,
        r.floor_ratio, r.normal.mre, r.normal.rel_l2, r.heavy.mre, r.heavy.rel_l2,
        r.device == "cpu" ? fmt::format("{:.6g}", r.uniform.mre) : "null", i + 1 < rows.size() ? "," : "");
  }
  out << "]\n";
}

void run(const Options& o) {
  std::vector<QuantSpec> specs;
  for (const MethodChoice& m : parse_method_list(o.methods)) {
    if (!method_info(m.config.base.method).payload)
      input_error(
          "--methods {}: {} is not a payload quantizer (the gradient exchange runs it as its own algorithm); "
          "time it with qtrain bench-allreduce",
          m.label, quant_method_name(m.config.base.method));
    specs.push_back(m.config.base);
  }
  std::vector<int64_t> sizes;
  for (const auto& s : split(o.sizes, ',')) sizes.push_back(parse_size(s));
  if (sizes.empty()) input_error("--sizes: no size given (e.g. --sizes 64K,16M)");
  // A size that is not a whole number of columns must not be measured silently as one long column.
  if (o.column < 1) input_error("--column must be >= 1, got {}", o.column);
  for (int64_t n : sizes)
    if (n % o.column != 0)
      input_error("--sizes: {} values are not a whole number of columns of --column {} (e.g. use {} values)", n,
                  o.column, n - n % o.column + o.column);
  std::vector<int> thread_counts;
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const auto& t : split(o.threads, ',')) {
    const int k = t == "all" ? all : std::atoi(t.c_str());
    if (k < 1 || k > 1024) input_error("--threads: '{}' is not a thread count or 'all'", t);
    if (std::find(thread_counts.begin(), thread_counts.end(), k) == thread_counts.end()) thread_counts.push_back(k);
  }
  if (o.repeat < 1) input_error("--repeat must be >= 1, got {}", o.repeat);
  const bool cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
  if (o.device == "cuda" && !cuda_available()) input_error("--device cuda: no CUDA GPU is available");
  if (o.profile_once && o.device != "cuda") input_error("--profile-once runs the CUDA kernels: give --device cuda");
  if (o.profile_once) {
    fmt::print("qtrain bench-quant --profile-once: {} methods, sizes {}, column length {}\n", specs.size(), o.sizes,
               o.column);
    std::vector<Row> rows;
    bench_cuda(o, specs, sizes, rows);
    return;
  }
  fmt::print("qtrain bench-quant: {} methods, sizes {}, column length {}, median of {} runs\n", specs.size(), o.sizes,
             o.column, o.repeat);
  fmt::print(
      "GB/s are of fp32 input (4 bytes per value); traffic = bytes read + written per value by encode +\n"
      "decode; memcpy = GB/s (read + write) of a memcpy of the span timed in turn with the method;\n"
      "floor = (traffic / memcpy bandwidth) / (encode + decode time): 100% = the copy's speed\n");
  std::vector<Row> rows;
  if (o.device != "cuda") bench_cpu(o, specs, sizes, thread_counts, rows);
  if (o.device != "cuda") print_errors(rows);
  if (cuda) bench_cuda(o, specs, sizes, rows);
  if (!o.json.empty()) write_json(o.json, rows);
}

}  // namespace

void add_bench_quant_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench-quant", "Quantizer encode/decode throughput, compression and error");
  cmd->add_option("--methods", o->methods, "Comma-separated methods, each name[:key=value...], e.g. qsgd:bits=8")
      ->capture_default_str();
  cmd->add_option("--sizes", o->sizes, "Comma-separated value counts (K = 1024, M = 1024^2)")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Comma-separated CPU thread counts, 'all' = every core")
      ->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "Timed runs per configuration (the median is reported)")
      ->capture_default_str();
  cmd->add_option("--column", o->column, "Column length (innermost dimension) for onebit column mode and adaptive")
      ->capture_default_str();
  cmd->add_option("--device", o->device, "cpu, cuda, or auto (the CPU, plus the GPU when one is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the results to this JSON file");
  cmd->add_flag("--profile-once", o->profile_once,
                "With --device cuda: only one encode and one decode of each method, each after a one-value "
                "scale_kernel launch that marks it, for a kernel profiler (ncu); nothing is timed or checked");
  cmd->add_option("--seed", o->seed, "Seed of the data and of the random rounding")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->callback([o] { run(*o); });
}

}  // namespace qtrain::cli
