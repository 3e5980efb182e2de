// The gradient exchange: bucketing, the communication thread, and the three reduction algorithms.
#include "comm/gradient_exchange.h"

#include <chrono>
#include <cstring>

#include "comm/buffer_ops.h"
#include "quant/wire.h"

namespace qtrain {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool uses_columns(const QuantSpec& s) {
  return s.method == QuantMethod::adaptive || (s.method == QuantMethod::onebit && s.mode == OnebitMode::column);
}

bool is_16bit(QuantMethod m) { return m == QuantMethod::fp16 || m == QuantMethod::bf16; }

}  // namespace

// Random-stream identities of the quantization states: distinct for every tensor, stripe and role.
uint64_t GradientExchange::state_id(int t, int role, int stripe) {
  return (static_cast<uint64_t>(t) << 24) | (static_cast<uint64_t>(role) << 20) | static_cast<uint64_t>(stripe);
}

int64_t GradientExchange::stripe_unit(const QuantSpec& spec, int64_t column) {
  return uses_columns(spec) ? std::max<int64_t>(1, column) : 1;
}

std::vector<int64_t> GradientExchange::stripe_bounds(int64_t numel, int64_t unit, int world_size) {
  const int64_t units = numel / unit;
  QT_CHECK(units * unit == numel, "a stripe unit of {} does not divide {} values", unit, numel);
  std::vector<int64_t> b(static_cast<size_t>(world_size) + 1);
  for (int s = 0; s <= world_size; ++s) b[static_cast<size_t>(s)] = units * s / world_size * unit;
  return b;
}

int64_t GradientExchange::encode_column(const QuantSpec& spec, int64_t length, int64_t column) {
  return uses_columns(spec) && column > 0 && length % column == 0 ? column : 1;
}

double ExchangeStats::hidden_s() const {
  const double busy = phases.seconds(Phase::encode) + phases.seconds(Phase::communicate) + phases.seconds(Phase::decode);
  return std::max(0.0, busy - wait_s);
}

GradientExchange::GradientExchange(Communicator& comm, Device device, uint64_t seed, const CommunicationConfig& config,
                                   const QuantizationConfig& quantization, std::vector<ExchangeTensor> tensors)
    : comm_(comm), device_(device), config_(config), tensors_(std::move(tensors)) {
  const int P = comm_.size();
  const int me = comm_.rank();
  ctx_ = std::make_unique<Context>(device.is_cuda() ? Context::cuda(device.index, seed) : Context::cpu(seed, 0));
  scale_ = config_.mean ? 1.0f / static_cast<float>(P) : 1.0f;
  plans_.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const ExchangeTensor& x = tensors_[t];
    Plan& p = plans_[t];
    p.spec = quantization.resolve(x.layer_name, x.layer_type, x.numel);
    p.algorithm = config_.algorithm_for(p.spec);
    if (p.algorithm == ReduceAlgorithm::allreduce) continue;
    p.quantizer = make_quantizer(p.spec);
    const int ti = static_cast<int>(t);
    if (p.algorithm == ReduceAlgorithm::allgather) {
      p.whole = QuantState(seed, me, state_id(ti, 0, 0));
      p.quantizer->init_state(p.whole, x.numel, device);
      continue;
    }
    // Stripes are balanced in units of whole columns for the methods that quantize per column.
    p.unit = stripe_unit(p.spec, x.column);
    p.stripe_begin = stripe_bounds(x.numel, p.unit, P);
    for (int s = 0; s < P; ++s) {
      p.stripes.emplace_back(seed, me, state_id(ti, 1, s));
      p.quantizer->init_state(p.stripes.back(), p.stripe_begin[static_cast<size_t>(s) + 1] - p.stripe_begin[static_cast<size_t>(s)], device);
    }
    p.owner = QuantState(seed, me, state_id(ti, 2, 0));
    p.quantizer->init_state(p.owner, p.stripe_begin[static_cast<size_t>(me) + 1] - p.stripe_begin[static_cast<size_t>(me)], device);
  }

  // Buckets in the order backward completes tensors: from the last tensor to the first.
  const double bucket_bytes = config_.bucket_mb * 1024.0 * 1024.0;
  double filled = 0;
  for (int t = static_cast<int>(tensors_.size()) - 1; t >= 0; --t) {
    if (buckets_.empty() || filled >= bucket_bytes) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().tensors.push_back(t);
    plans_[static_cast<size_t>(t)].bucket = static_cast<int>(buckets_.size()) - 1;
    filled += 4.0 * static_cast<double>(tensors_[static_cast<size_t>(t)].numel);
  }
  stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
  if (config_.overlap) thread_ = std::thread([this] { run_thread(); });
}

GradientExchange::~GradientExchange() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double GradientExchange::fraction_quantized() const {
  double total = 0, quantized = 0;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    total += static_cast<double>(tensors_[t].numel);
    if (plans_[t].spec.method != QuantMethod::fp32) quantized += static_cast<double>(tensors_[t].numel);
  }
  return total > 0 ? quantized / total : 0.0;
}

std::string GradientExchange::describe() const {
  std::string s;
  for (size_t t = 0; t < tensors_.size(); ++t)
    s += fmt::format("{:<20} {:>10} values  {:<40} {:<25} bucket {}\n", tensors_[t].name, tensors_[t].numel,
                     plans_[t].spec.str(), reduce_algorithm_name(plans_[t].algorithm), plans_[t].bucket);
  return s;
}

void GradientExchange::begin_step(Tensor grads, uint64_t step) {
  QT_CHECK(grads.dtype() == DType::f32 && grads.device() == device_, "gradients must be f32 on {}, got {} on {}",
           device_.str(), dtype_name(grads.dtype()), grads.device().str());
  for (const ExchangeTensor& x : tensors_)
    QT_CHECK(x.offset + x.numel <= grads.numel(), "tensor {} lies outside the gradient arena", x.name);
  std::lock_guard<std::mutex> lock(mutex_);
  QT_CHECK(queue_.empty(), "begin_step while the previous step is still being exchanged");
  grads_ = std::move(grads);
  compute_ = nullptr;
  step_ = step;
  ctx_->set_step(step);
  done_ = 0;
  error_ = nullptr;
  for (Bucket& b : buckets_) b.pending = static_cast<int>(b.tensors.size());
}

void GradientExchange::tensor_ready(Context& compute, int t) {
  QT_CHECK(t >= 0 && t < static_cast<int>(tensors_.size()), "tensor index {} out of range", t);
  Bucket& b = buckets_[static_cast<size_t>(plans_[static_cast<size_t>(t)].bucket)];
  if (!config_.overlap) compute_ = &compute;  // finish_step synchronizes it once
  if (--b.pending > 0) return;
  if (!config_.overlap) return;  // finish_step processes every bucket in order
  // The exchange reads the gradient on its own stream: the compute stream's work must be done.
  compute.synchronize();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(plans_[static_cast<size_t>(t)].bucket);
  }
  cv_.notify_all();
}

void GradientExchange::finish_step() {
  const auto start = Clock::now();
  if (!config_.overlap) {
    // The exchange reads the gradients on its own stream: the compute stream's backward must be done
    // (on CUDA the two streams are not ordered; without this the first buckets raced the last kernels).
    if (compute_ != nullptr) compute_->synchronize();
    for (int b = 0; b < num_buckets(); ++b) {
      QT_CHECK(buckets_[static_cast<size_t>(b)].pending == 0, "bucket {} was not complete at the end of backward", b);
      process_bucket(b);
    }
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_ == num_buckets() || error_ != nullptr; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      queue_.clear();
      std::rethrow_exception(e);
    }
  }
  ctx_->synchronize();
  stats_.wait_s += since(start);
  ++stats_.steps;
}

void GradientExchange::exchange(Context& compute, Tensor grads, uint64_t step) {
  begin_step(std::move(grads), step);
  for (int t = static_cast<int>(tensors_.size()) - 1; t >= 0; --t) tensor_ready(compute, t);
  finish_step();
}

ExchangeStats GradientExchange::take_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  ExchangeStats out = stats_;
  out.bytes_sent = 0;
  for (double b : out.bytes_sent_per_tensor) out.bytes_sent += b;
  stats_ = ExchangeStats{};
  stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
  return out;
}

std::vector<std::pair<std::string, Tensor>> GradientExchange::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    Plan& p = plans_[t];
    auto add = [&](QuantState& s, const std::string& role) {
      for (auto& [name, tensor] : s.state()) out.emplace_back(tensors_[t].name + role + "/" + name, tensor);
    };
    add(p.whole, "");
    for (size_t s = 0; s < p.stripes.size(); ++s) add(p.stripes[s], "/stripe" + std::to_string(s));
    add(p.owner, "/owner");
  }
  return out;
}

void GradientExchange::run_thread() {
  bool device_selected = false;
  for (;;) {
    int b = -1;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      b = queue_.front();
    }
    try {
      // The thread's CUDA calls (encode kernels, copies, NCCL) must address this rank's GPU; CUDA's
      // current device is per thread and would otherwise be GPU 0. A failure is reported like a
      // failed bucket.
      if (!device_selected) use_device_on_this_thread(device_);
      device_selected = true;
      process_bucket(b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      queue_.clear();
      cv_.notify_all();
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!queue_.empty()) queue_.pop_front();
      ++done_;
    }
    cv_.notify_all();
  }
}

void GradientExchange::process_bucket(int b) {
  std::vector<int> native, gathered, striped;
  for (int t : buckets_[static_cast<size_t>(b)].tensors) {
    switch (plans_[static_cast<size_t>(t)].algorithm) {
      case ReduceAlgorithm::allreduce: native.push_back(t); break;
      case ReduceAlgorithm::allgather: gathered.push_back(t); break;
      case ReduceAlgorithm::reduce_scatter_allgather: striped.push_back(t); break;
    }
  }
  if (!native.empty()) reduce_native(native);
  if (!gathered.empty()) reduce_allgather(gathered);
  if (!striped.empty()) reduce_scatter_allgather(striped);
}

uint8_t* GradientExchange::device_bytes(Tensor& buffer, size_t bytes) {
  if (!buffer.defined() || buffer.nbytes() < bytes)
    buffer = Tensor::empty({static_cast<int64_t>(std::max<size_t>(bytes, 64) * 5 / 4)}, DType::u8, device_);
  return buffer.data<uint8_t>();
}

void GradientExchange::decode_from(int from_rank, std::span<const uint8_t> bytes, const std::vector<int>& ids,
                                   bool add, const std::function<Span(int)>& where) {
  // Transports deliver into host memory; CUDA decoders read device memory.
  const uint8_t* base = bytes.data();
  if (device_.is_cuda() && !bytes.empty()) {
    uint8_t* dev = device_bytes(recv_dev_, bytes.size());
    copy_from_host(*ctx_, dev, bytes.data(), bytes.size());
    base = dev;
  }
  size_t cursor = 0;
  for (int t : ids) {
    const auto [begin, len] = where(t);
    if (len == 0) continue;  // empty stripes are never sent
    const size_t plen = payload_length(bytes, cursor, t, from_rank);
    const std::span<const uint8_t> payload{base + cursor, plen};
    const std::span<float> out{grad(t) + begin, static_cast<size_t>(len)};
    const Quantizer& q = *plans_[static_cast<size_t>(t)].quantizer;
    if (add)
      q.decode_add(*ctx_, payload, len, out);
    else
      q.decode(*ctx_, payload, len, out);
    cursor += plen;
  }
  if (cursor != bytes.size())
    input_error("gradient exchange: rank {} sent {} bytes more than its payloads describe", from_rank,
                bytes.size() - cursor);
}

uint8_t* GradientExchange::send_buffer(size_t capacity) {
  if (send_host_.size() < capacity) send_host_.resize(capacity);
  return device_.is_cuda() ? device_bytes(send_dev_, capacity) : send_host_.data();
}

int64_t GradientExchange::column_for(const Plan& p, int64_t length, int64_t column) const {
  return encode_column(p.spec, length, column);
}

size_t GradientExchange::payload_length(std::span<const uint8_t> bytes, size_t cursor, int t, int from_rank) const {
  const std::string& name = tensors_[static_cast<size_t>(t)].name;
  const size_t left = cursor <= bytes.size() ? bytes.size() - cursor : 0;
  if (left < wire::kHeaderBytes)
    input_error("gradient exchange: rank {} sent a truncated payload for {} ({} bytes left, a header needs {})",
                from_rank, name, left, wire::kHeaderBytes);
  const WireHeader h = wire::read_header(bytes.data() + cursor);
  if (h.total < wire::kHeaderBytes || h.total > left || h.total % wire::kAlign != 0)
    input_error("gradient exchange: rank {} sent a malformed payload for {} (length field {}, {} bytes available)",
                from_rank, name, h.total, left);
  return static_cast<size_t>(h.total);
}

void GradientExchange::reduce_native(const std::vector<int>& ids) {
  // fp32 tensors are packed into one buffer and summed with one collective (tensor fusion); fp16 and
  // bf16 tensors are converted into a 16-bit buffer, summed (fp32 accumulation where the library
  // allows it) and converted back.
  Context& ctx = *ctx_;
  for (const bool sixteen : {false, true}) {
    int64_t total = 0;
    for (int t : ids)
      if (is_16bit(plans_[static_cast<size_t>(t)].spec.method) == sixteen) total += tensors_[static_cast<size_t>(t)].numel;
    if (total == 0) continue;
    // In a world of one the fp32 sum is the gradient itself: nothing to move. (16-bit tensors still
    // go through the rounding, which is the effect being studied.)
    if (!sixteen && comm_.size() == 1 && scale_ == 1.0f) continue;
    const size_t elem = sixteen ? 2 : 4;
    uint8_t* stage = device_bytes(stage_dev_, static_cast<size_t>(total) * elem);
    auto t0 = Clock::now();
    int64_t at = 0;
    for (int t : ids) {
      const Plan& p = plans_[static_cast<size_t>(t)];
      if (is_16bit(p.spec.method) != sixteen) continue;
      const int64_t n = tensors_[static_cast<size_t>(t)].numel;
      if (sixteen)
        pack_16bit(ctx, grad(t), reinterpret_cast<uint16_t*>(stage) + at, n, p.spec.method == QuantMethod::bf16);
      else
        copy_buffer(ctx, reinterpret_cast<float*>(stage) + at, grad(t), static_cast<size_t>(n) * 4);
      at += n;
    }
    stats_.phases.add(Phase::encode, since(t0));
    t0 = Clock::now();
    // Both 16-bit formats are summed as the first tensor's type: a bucket mixing fp16 and bf16
    // would need two collectives; split them.
    ReduceType type = ReduceType::f32;
    if (sixteen) {
      bool any_bf16 = false, any_f16 = false;
      for (int t : ids) {
        any_bf16 |= plans_[static_cast<size_t>(t)].spec.method == QuantMethod::bf16;
        any_f16 |= plans_[static_cast<size_t>(t)].spec.method == QuantMethod::fp16;
      }
      QT_CHECK(!(any_bf16 && any_f16), "a bucket mixes fp16 and bf16 tensors; give them separate buckets");
      type = any_bf16 ? ReduceType::bf16 : ReduceType::f16;
    }
    comm_.all_reduce_sum(ctx, stage, total, type);
    stats_.phases.add(Phase::communicate, since(t0));
    t0 = Clock::now();
    at = 0;
    const int P = comm_.size();
    for (int t : ids) {
      const Plan& p = plans_[static_cast<size_t>(t)];
      if (is_16bit(p.spec.method) != sixteen) continue;
      const int64_t n = tensors_[static_cast<size_t>(t)].numel;
      if (sixteen) {
        unpack_16bit(ctx, reinterpret_cast<const uint16_t*>(stage) + at, grad(t), n, p.spec.method == QuantMethod::bf16,
                     scale_);
      } else {
        copy_buffer(ctx, grad(t), reinterpret_cast<const float*>(stage) + at, static_cast<size_t>(n) * 4);
        if (scale_ != 1.0f) scale_buffer(ctx, grad(t), n, scale_);
      }
      // A bandwidth-optimal (ring) allreduce sends 2(P-1)/P of the data from every rank.
      stats_.bytes_sent_per_tensor[static_cast<size_t>(t)] += 2.0 * (P - 1) / P * static_cast<double>(n * static_cast<int64_t>(elem));
      at += n;
    }
    stats_.phases.add(Phase::decode, since(t0));
  }
}

void GradientExchange::reduce_allgather(const std::vector<int>& ids) {
  Context& ctx = *ctx_;
  const int P = comm_.size();
  const bool cuda = device_.is_cuda();
  // Encode every tensor of the bucket, back to back, into one send buffer.
  const auto start = Clock::now();
  size_t capacity = 0;
  for (int t : ids) {
    const ExchangeTensor& x = tensors_[static_cast<size_t>(t)];
    capacity += plans_[static_cast<size_t>(t)].quantizer->max_encoded_bytes(x.numel, column_for(plans_[static_cast<size_t>(t)], x.numel, x.column));
  }
  uint8_t* send = send_buffer(capacity);
  size_t used = 0;
  std::vector<size_t> own(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    Plan& p = plans_[static_cast<size_t>(t)];
    const ExchangeTensor& x = tensors_[static_cast<size_t>(t)];
    const int64_t col = column_for(p, x.numel, x.column);
    own[i] = p.quantizer->encode(ctx, {grad(t), static_cast<size_t>(x.numel)}, col, p.whole,
                                 {send + used, p.quantizer->max_encoded_bytes(x.numel, col)});
    used += own[i];
  }
  if (cuda) copy_to_host(ctx, send_host_.data(), send, used);
  const double encode_s = since(start);

  // Every rank's payload goes to every rank; each is decoded as soon as it and those of the lower
  // ranks have arrived, in rank order: the first overwrites, the others add, so every rank sums the
  // same bytes in the same order.
  double decode_s = 0;
  const auto exchange_start = Clock::now();
  capacity_.assign(static_cast<size_t>(P), capacity);
  comm_.all_gather_streamed(ctx, {send_host_.data(), used}, capacity_, recv_host_,
                            [&](int r, std::span<const uint8_t> bytes) {
                              const auto t0 = Clock::now();
                              decode_from(r, bytes, ids, /*add=*/r > 0, [&](int t) {
                                return Span{0, tensors_[static_cast<size_t>(t)].numel};
                              });
                              decode_s += since(t0);
                            });
  const auto t0 = Clock::now();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    if (scale_ != 1.0f) scale_buffer(ctx, grad(t), tensors_[static_cast<size_t>(t)].numel, scale_);
    stats_.bytes_sent_per_tensor[static_cast<size_t>(t)] += static_cast<double>(own[i]) * (P - 1);
  }
  decode_s += since(t0);
  stats_.phases.add(Phase::encode, encode_s);
  stats_.phases.add(Phase::decode, decode_s);
  stats_.phases.add(Phase::communicate, std::max(0.0, since(exchange_start) - decode_s));
}

void GradientExchange::reduce_scatter_allgather(const std::vector<int>& ids) {
  Context& ctx = *ctx_;
  const int P = comm_.size();
  const int me = comm_.rank();
  const bool cuda = device_.is_cuda();
  const auto start = Clock::now();
  auto stripe = [&](int t, int s) {
    const Plan& p = plans_[static_cast<size_t>(t)];
    return Span{p.stripe_begin[static_cast<size_t>(s)],
                p.stripe_begin[static_cast<size_t>(s) + 1] - p.stripe_begin[static_cast<size_t>(s)]};
  };
  // The most bytes stripe s of the bucket's tensors can take (the same figure on every rank).
  auto stripe_capacity = [&](int s) {
    size_t c = 0;
    for (int t : ids) {
      const auto [b, len] = stripe(t, s);
      const Plan& p = plans_[static_cast<size_t>(t)];
      if (len > 0) c += p.quantizer->max_encoded_bytes(len, column_for(p, len, tensors_[static_cast<size_t>(t)].column));
    }
    return c;
  };
  double encode_s = 0, decode_s = 0;

  // 1. Every rank encodes stripe d of every tensor for its owner d, one owner at a time, and each
  //    owner's bytes leave while the next owner's are encoded. The owner decodes and sums its stripe
  //    from every rank (its own contribution from its own encoding), in rank order.
  send_offsets_.assign(static_cast<size_t>(P) + 1, 0);
  for (int s = 0; s < P; ++s)
    send_offsets_[static_cast<size_t>(s) + 1] = send_offsets_[static_cast<size_t>(s)] + stripe_capacity(s);
  uint8_t* send = send_buffer(send_offsets_.back());
  std::vector<double> sent_to_others(ids.size(), 0.0);
  capacity_.assign(static_cast<size_t>(P), stripe_capacity(me));
  comm_.all_to_all_streamed(
      ctx,
      [&](int d) -> std::span<const uint8_t> {
        const auto t0 = Clock::now();
        uint8_t* out = send + send_offsets_[static_cast<size_t>(d)];
        size_t used = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
          const int t = ids[i];
          Plan& p = plans_[static_cast<size_t>(t)];
          const auto [b, len] = stripe(t, d);
          if (len == 0) continue;
          const int64_t col = column_for(p, len, tensors_[static_cast<size_t>(t)].column);
          const size_t bytes = p.quantizer->encode(ctx, {grad(t) + b, static_cast<size_t>(len)}, col,
                                                   p.stripes[static_cast<size_t>(d)],
                                                   {out + used, p.quantizer->max_encoded_bytes(len, col)});
          used += bytes;
          if (d != me) sent_to_others[i] += static_cast<double>(bytes);
        }
        const uint8_t* host = out;
        if (cuda) {
          host = send_host_.data() + send_offsets_[static_cast<size_t>(d)];
          copy_to_host(ctx, send_host_.data() + send_offsets_[static_cast<size_t>(d)], out, used);
        }
        encode_s += since(t0);
        return {host, used};
      },
      capacity_, recv_host_,
      [&](int s, std::span<const uint8_t> bytes) {
        const auto t0 = Clock::now();
        decode_from(s, bytes, ids, /*add=*/s > 0, [&](int t) { return stripe(t, me); });
        decode_s += since(t0);
      });
  auto t0 = Clock::now();
  for (int t : ids) {
    const auto [b, len] = stripe(t, me);
    if (len > 0 && scale_ != 1.0f) scale_buffer(ctx, grad(t) + b, len, scale_);
  }
  decode_s += since(t0);

  // 2. The owner re-encodes its reduced stripe (own residual, fresh random key) ...
  t0 = Clock::now();
  send = send_buffer(stripe_capacity(me));
  size_t used = 0;
  std::vector<size_t> own(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    Plan& p = plans_[static_cast<size_t>(t)];
    const auto [b, len] = stripe(t, me);
    if (len == 0) continue;
    const int64_t col = column_for(p, len, tensors_[static_cast<size_t>(t)].column);
    own[i] = p.quantizer->encode(ctx, {grad(t) + b, static_cast<size_t>(len)}, col, p.owner,
                                 {send + used, p.quantizer->max_encoded_bytes(len, col)});
    used += own[i];
  }
  if (cuda) copy_to_host(ctx, send_host_.data(), send, used);
  encode_s += since(t0);

  // ... and the owners' payloads go to everyone, who decode every stripe from the same bytes as
  // they arrive.
  for (int s = 0; s < P; ++s) capacity_[static_cast<size_t>(s)] = stripe_capacity(s);
  comm_.all_gather_streamed(ctx, {send_host_.data(), used}, capacity_, recv_host_,
                            [&](int owner, std::span<const uint8_t> bytes) {
                              const auto t1 = Clock::now();
                              decode_from(owner, bytes, ids, /*add=*/false, [&](int t) { return stripe(t, owner); });
                              decode_s += since(t1);
                            });
  for (size_t i = 0; i < ids.size(); ++i)
    stats_.bytes_sent_per_tensor[static_cast<size_t>(ids[i])] += sent_to_others[i] + static_cast<double>(own[i]) * (P - 1);
  stats_.phases.add(Phase::encode, encode_s);
  stats_.phases.add(Phase::decode, decode_s);
  stats_.phases.add(Phase::communicate, std::max(0.0, since(start) - encode_s - decode_s));
}

}  // namespace qtrain
