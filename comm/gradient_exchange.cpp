// The gradient exchange: bucketing, the communication thread, and the three reduction algorithms.
#include "comm/gradient_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "comm/buffer_ops.h"
#include "quant/method.h"
#include "quant/wire.h"

namespace qtrain {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool uses_columns(const QuantSpec& s) { return method_info(s.method).columnar(s); }

bool is_16bit(QuantMethod m) { return method_info(m).cast_bits == 16; }

}  // namespace

// Random-stream identities of the quantization states: distinct for every tensor, stripe and role.
uint64_t GradientExchange::state_id(int t, int role, int stripe) {
  return (static_cast<uint64_t>(t) << 24) | (static_cast<uint64_t>(role) << 20) | static_cast<uint64_t>(stripe);
}

uint64_t GradientExchange::piece_state_id(int t, bool owner, int stripe, int piece, int world_size) {
  if (piece == 0) return owner ? state_id(t, 2, 0) : state_id(t, 1, stripe);
  const int64_t index = owner ? piece : int64_t{piece} * world_size + stripe;
  QT_CHECK(index < (int64_t{1} << 20), "{} pieces of {} stripes exceed the random-stream ids; raise communication.piece_mb",
           piece + 1, world_size);
  return state_id(t, owner ? 4 : 3, static_cast<int>(index));
}

int GradientExchange::piece_count(const std::vector<int64_t>& stripe_begin, int64_t unit, int64_t piece_values) {
  int64_t widest = 0;  // units
  for (size_t s = 0; s + 1 < stripe_begin.size(); ++s) widest = std::max(widest, (stripe_begin[s + 1] - stripe_begin[s]) / unit);
  const int64_t per_piece = std::max<int64_t>(1, piece_values / unit);
  if (piece_values <= 0 || widest <= per_piece) return 1;
  const int64_t pieces = (widest + per_piece - 1) / per_piece;
  QT_CHECK(pieces < Communicator::kMaxPointToPointTag / 2, "{} pieces per stripe; raise communication.piece_mb", pieces);
  return static_cast<int>(pieces);
}

std::vector<int64_t> GradientExchange::piece_bounds(int64_t begin, int64_t end, int64_t unit, int pieces) {
  const int64_t units = (end - begin) / unit;
  std::vector<int64_t> b(static_cast<size_t>(pieces) + 1);
  for (int k = 0; k <= pieces; ++k) b[static_cast<size_t>(k)] = begin + units * k / pieces * unit;
  return b;
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
  // Every rank must hold its gradients on the same kind of device: the schedule depends on it
  // (pipelined pieces on the CPU, piece by piece on a GPU), and ranks on different schedules wait for
  // different messages (a hang); their replicas could not stay identical either. With device: auto a
  // host without a GPU would put its ranks on the CPU.
  const std::vector<uint64_t> kinds = comm_.all_gather_u64(device.is_cuda() ? 1 : 0);
  for (size_t r = 0; r < kinds.size(); ++r)
    if (kinds[r] != kinds[0])
      input_error("rank {} runs on {} but rank 0 on {}; every rank must train on the same kind of device (give "
                  "every host a GPU, or set device: cpu)",
                  r, kinds[r] ? "a GPU" : "the CPU", kinds[0] ? "a GPU" : "the CPU");
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
    const auto piece_values = static_cast<int64_t>(config_.piece_mb * 1024.0 * 1024.0 / 4.0);
    const int K = piece_count(p.stripe_begin, p.unit, piece_values);
    p.stripes.resize(static_cast<size_t>(P));
    for (int s = 0; s < P; ++s) {
      p.piece_begin.push_back(
          piece_bounds(p.stripe_begin[static_cast<size_t>(s)], p.stripe_begin[static_cast<size_t>(s) + 1], p.unit, K));
      for (int k = 0; k < K; ++k) {
        QuantState& st = p.stripes[static_cast<size_t>(s)].emplace_back(seed, me, piece_state_id(ti, false, s, k, P));
        p.quantizer->init_state(st, p.piece_len(s, k), device);
      }
    }
    for (int k = 0; k < K; ++k) {
      QuantState& st = p.owner.emplace_back(seed, me, piece_state_id(ti, true, me, k, P));
      p.quantizer->init_state(st, p.piece_len(me, k), device);
    }
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
    auto piece = [](size_t k) { return k == 0 ? std::string() : ".piece" + std::to_string(k); };
    add(p.whole, "");
    for (size_t s = 0; s < p.stripes.size(); ++s)
      for (size_t k = 0; k < p.stripes[s].size(); ++k) add(p.stripes[s][k], "/stripe" + std::to_string(s) + piece(k));
    for (size_t k = 0; k < p.owner.size(); ++k) add(p.owner[k], "/owner" + piece(k));
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
  const auto start = Clock::now();
  int pieces = 0;
  for (int t : ids) pieces = std::max(pieces, plans_[static_cast<size_t>(t)].pieces());
  double encode_s = 0, decode_s = 0;
  std::vector<double> sent(ids.size(), 0.0);
  // Pipelining needs point-to-point messages on host memory, each piece's payload in one message.
  bool pipelined = pieces > 1 && comm_.size() > 1 && comm_.has_point_to_point() && !device_.is_cuda();
  std::vector<size_t> capacity;  // [k * P + s]: piece k of stripe s
  for (int k = 0; pipelined && k < pieces; ++k)
    for (int s = 0; s < comm_.size(); ++s) {
      capacity.push_back(piece_capacity(ids, s, k));
      pipelined = pipelined && capacity.back() <= comm_.max_point_to_point_bytes();
    }
  if (pipelined)
    reduce_scatter_allgather_pipelined(ids, pieces, capacity, encode_s, decode_s, sent);
  else
    for (int k = 0; k < pieces; ++k) reduce_scatter_allgather_piece(ids, k, encode_s, decode_s, sent);
  for (size_t i = 0; i < ids.size(); ++i) stats_.bytes_sent_per_tensor[static_cast<size_t>(ids[i])] += sent[i];
  stats_.phases.add(Phase::encode, encode_s);
  stats_.phases.add(Phase::decode, decode_s);
  stats_.phases.add(Phase::communicate, std::max(0.0, since(start) - encode_s - decode_s));
}

GradientExchange::Span GradientExchange::piece(int t, int s, int k) const {
  const Plan& p = plans_[static_cast<size_t>(t)];
  if (k >= p.pieces()) return Span{0, 0};  // a tensor with fewer pieces than the bucket's widest
  return Span{p.piece_at(s, k), p.piece_len(s, k)};
}

size_t GradientExchange::piece_capacity(const std::vector<int>& ids, int s, int k) const {
  size_t c = 0;
  for (int t : ids) {
    const auto [b, len] = piece(t, s, k);
    const Plan& p = plans_[static_cast<size_t>(t)];
    if (len > 0) c += p.quantizer->max_encoded_bytes(len, column_for(p, len, tensors_[static_cast<size_t>(t)].column));
  }
  return c;
}

size_t GradientExchange::encode_piece(const std::vector<int>& ids, int s, int k, bool owner, uint8_t* out,
                                      std::vector<double>* sent, int copies) {
  Context& ctx = *ctx_;
  size_t used = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    Plan& p = plans_[static_cast<size_t>(t)];
    const auto [b, len] = piece(t, s, k);
    if (len == 0) continue;
    const int64_t col = column_for(p, len, tensors_[static_cast<size_t>(t)].column);
    QuantState& state = owner ? p.owner[static_cast<size_t>(k)] : p.stripes[static_cast<size_t>(s)][static_cast<size_t>(k)];
    const size_t bytes = p.quantizer->encode(ctx, {grad(t) + b, static_cast<size_t>(len)}, col, state,
                                             {out + used, p.quantizer->max_encoded_bytes(len, col)});
    used += bytes;
    if (sent) (*sent)[i] += static_cast<double>(bytes) * copies;
  }
  return used;
}

void GradientExchange::scale_piece(const std::vector<int>& ids, int k) {
  if (scale_ == 1.0f) return;
  for (int t : ids) {
    const auto [b, len] = piece(t, comm_.rank(), k);
    if (len > 0) scale_buffer(*ctx_, grad(t) + b, len, scale_);
  }
}

void GradientExchange::reduce_scatter_allgather_piece(const std::vector<int>& ids, int k, double& encode_s,
                                                      double& decode_s, std::vector<double>& sent) {
  Context& ctx = *ctx_;
  const int P = comm_.size();
  const int me = comm_.rank();
  const bool cuda = device_.is_cuda();

  // 1. Every rank encodes piece k of stripe d of every tensor for its owner d, one owner at a time,
  //    and each owner's bytes leave while the next owner's are encoded. The owner decodes and sums
  //    its piece from every rank (its own contribution from its own encoding), in rank order.
  send_offsets_.assign(static_cast<size_t>(P) + 1, 0);
  for (int s = 0; s < P; ++s)
    send_offsets_[static_cast<size_t>(s) + 1] = send_offsets_[static_cast<size_t>(s)] + piece_capacity(ids, s, k);
  uint8_t* send = send_buffer(send_offsets_.back());
  capacity_.assign(static_cast<size_t>(P), piece_capacity(ids, me, k));
  comm_.all_to_all_streamed(
      ctx,
      [&](int d) -> std::span<const uint8_t> {
        const auto t0 = Clock::now();
        uint8_t* out = send + send_offsets_[static_cast<size_t>(d)];
        const size_t used = encode_piece(ids, d, k, /*owner=*/false, out, &sent, d != me ? 1 : 0);
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
        decode_from(s, bytes, ids, /*add=*/s > 0, [&](int t) { return piece(t, me, k); });
        decode_s += since(t0);
      });
  auto t0 = Clock::now();
  scale_piece(ids, k);
  decode_s += since(t0);

  // 2. The owner re-encodes its reduced piece (own residual, fresh random key) ...
  t0 = Clock::now();
  send = send_buffer(piece_capacity(ids, me, k));
  const size_t used = encode_piece(ids, me, k, /*owner=*/true, send, &sent, P - 1);
  if (cuda) copy_to_host(ctx, send_host_.data(), send, used);
  encode_s += since(t0);

  // ... and the owners' payloads go to everyone, who decode every piece from the same bytes as
  // they arrive.
  for (int s = 0; s < P; ++s) capacity_[static_cast<size_t>(s)] = piece_capacity(ids, s, k);
  comm_.all_gather_streamed(ctx, {send_host_.data(), used}, capacity_, recv_host_,
                            [&](int owner, std::span<const uint8_t> bytes) {
                              const auto t1 = Clock::now();
                              decode_from(owner, bytes, ids, /*add=*/false, [&](int t) { return piece(t, owner, k); });
                              decode_s += since(t1);
                            });
}

void GradientExchange::reduce_scatter_allgather_pipelined(const std::vector<int>& ids, int pieces,
                                                          const std::vector<size_t>& capacity, double& encode_s,
                                                          double& decode_s, std::vector<double>& sent) {
  const int P = comm_.size();
  const int me = comm_.rank();
  const auto K = static_cast<size_t>(pieces);
  const auto ranks = static_cast<size_t>(P);
  const auto mine = static_cast<size_t>(me);
  auto cap = [&](size_t s, size_t k) { return capacity[k * ranks + s]; };
  // Buffers, alive until complete_all(), four per (piece, rank): the phase-1 payload to owner d, the
  // one from rank s, the phase-2 payload from owner o, and (once per piece) this owner's phase-2
  // payload. Tags: phase 1 of piece k is 2k, phase 2 is 2k + 1 (piece_count keeps them in range).
  std::vector<std::vector<uint8_t>>& bufs = pipeline_buffers_;
  if (bufs.size() < K * ranks * 4) bufs.resize(K * ranks * 4);
  // A slot grows (if it must) before its one message of this exchange is posted, never after.
  auto buffer = [&](size_t slot, size_t bytes) -> std::vector<uint8_t>& {
    if (bufs[slot].size() < bytes) bufs[slot].resize(bytes);
    return bufs[slot];
  };
  auto to_owner = [&](size_t k, size_t d) { return (k * ranks + d) * 4; };
  auto from_rank = [&](size_t k, size_t s) { return (k * ranks + s) * 4 + 1; };
  auto from_owner = [&](size_t k, size_t o) { return (k * ranks + o) * 4 + 2; };
  auto own_phase2 = [&](size_t k) { return k * ranks * 4 + 3; };

  // Receives, posted up front, indexed [k * P + s]: from rank s for this owner's piece k (phase 1)
  // and from owner s (phase 2). Their byte counts, -1 while pending: a request that test() or
  // wait_any() reported complete cannot be asked again.
  std::vector<int> phase1_request(K * ranks, -1), phase2_request(K * ranks, -1);
  std::vector<int64_t> phase1_bytes(K * ranks, -1), phase2_bytes(K * ranks, -1);
  for (size_t k = 0; k < K; ++k)
    for (size_t s = 0; s < ranks; ++s) {
      if (s == mine) continue;
      std::vector<uint8_t>& in1 = buffer(from_rank(k, s), cap(mine, k));
      phase1_request[k * ranks + s] = comm_.post_recv({in1.data(), cap(mine, k)}, static_cast<int>(s), static_cast<int>(2 * k));
      std::vector<uint8_t>& in2 = buffer(from_owner(k, s), cap(s, k));
      phase2_request[k * ranks + s] = comm_.post_recv({in2.data(), cap(s, k)}, static_cast<int>(s), static_cast<int>(2 * k + 1));
    }
  auto arrived = [&](int request, int64_t& bytes) {
    size_t n = 0;
    if (bytes < 0 && comm_.test(request, &n)) bytes = static_cast<int64_t>(n);
    return bytes >= 0;
  };

  std::vector<size_t> own_size(K, 0);
  std::vector<char> own_encoded(K, 0), summed(K, 0), phase2_decoded(K * ranks, 0);
  std::vector<int> next_rank(K, 0);          // the next contribution the owner sums, per piece
  std::vector<int> phase2_left(K, P - 1);    // other owners' payloads not yet decoded, per piece
  // Pieces [first_open, produced) are the ones with work left that can have any: a piece is only
  // summed after this rank encoded its own contribution, and other owners' phase 2 needs it too.
  size_t first_open = 0, produced = 0;
  auto advance = [&] {
    while (first_open < produced && summed[first_open] && phase2_left[first_open] == 0) ++first_open;
    for (size_t k = first_open; k < produced; ++k) {
      const int ki = static_cast<int>(k);
      // The owner sums piece k from the contributions in rank order, and only after this rank has
      // encoded its own (the sum overwrites the values it encodes).
      while (own_encoded[k] && next_rank[k] < P) {
        const auto s = static_cast<size_t>(next_rank[k]);
        if (s != mine && !arrived(phase1_request[k * ranks + s], phase1_bytes[k * ranks + s])) break;
        const std::span<const uint8_t> bytes =
            s == mine ? std::span<const uint8_t>{bufs[to_owner(k, s)].data(), own_size[k]}
                      : std::span<const uint8_t>{bufs[from_rank(k, s)].data(), static_cast<size_t>(phase1_bytes[k * ranks + s])};
        const auto t0 = Clock::now();
        decode_from(static_cast<int>(s), bytes, ids, /*add=*/s > 0, [&](int t) { return piece(t, me, ki); });
        decode_s += since(t0);
        ++next_rank[k];
      }
      if (next_rank[k] == P && !summed[k]) {
        // Piece k is summed: scale it, re-encode it (own residual, fresh key), send it to every rank
        // and decode it here too, so that every rank holds the values of the same bytes.
        summed[k] = 1;
        auto t0 = Clock::now();
        scale_piece(ids, ki);
        std::vector<uint8_t>& out = buffer(own_phase2(k), cap(mine, k));
        const size_t used = encode_piece(ids, me, ki, /*owner=*/true, out.data(), &sent, P - 1);
        encode_s += since(t0);
        for (int j = 1; j < P; ++j) comm_.post_send({out.data(), used}, (me + j) % P, static_cast<int>(2 * k + 1));
        t0 = Clock::now();
        decode_from(me, {out.data(), used}, ids, /*add=*/false, [&](int t) { return piece(t, me, ki); });
        decode_s += since(t0);
      }
      // Other owners' pieces, in any order: they write disjoint values.
      for (size_t o = 0; o < ranks; ++o) {
        const size_t i = k * ranks + o;
        if (o == mine || phase2_decoded[i] || !arrived(phase2_request[i], phase2_bytes[i])) continue;
        phase2_decoded[i] = 1;
        --phase2_left[k];
        const auto t0 = Clock::now();
        decode_from(static_cast<int>(o), {bufs[from_owner(k, o)].data(), static_cast<size_t>(phase2_bytes[i])}, ids,
                    /*add=*/false, [&](int t) { return piece(t, static_cast<int>(o), ki); });
        decode_s += since(t0);
      }
    }
  };

  // Phase 1, piece by piece, owner by owner (from the right neighbour to this rank's own
  // contribution); after each encode, whatever has arrived is processed.
  for (size_t k = 0; k < K; ++k) {
    produced = k + 1;
    for (int j = 1; j <= P; ++j) {
      const auto d = static_cast<size_t>((me + j) % P);
      const auto t0 = Clock::now();
      std::vector<uint8_t>& out = buffer(to_owner(k, d), cap(d, k));
      const size_t used = encode_piece(ids, static_cast<int>(d), static_cast<int>(k), /*owner=*/false, out.data(), &sent, d != mine ? 1 : 0);
      encode_s += since(t0);
      if (d == mine) {
        own_size[k] = used;
        own_encoded[k] = 1;
      } else {
        comm_.post_send({out.data(), used}, static_cast<int>(d), static_cast<int>(2 * k));
      }
      advance();
    }
  }
  // Then block on whatever is still missing until every piece is summed, sent and received (each
  // round's advance() handles the previous round's arrival).
  for (;;) {
    advance();
    std::vector<int> waiting;
    std::vector<int64_t*> bytes_of;
    for (size_t i = 0; i < K * ranks; ++i) {
      if (i % ranks == mine) continue;
      for (auto [request, bytes] : {std::pair{phase1_request[i], &phase1_bytes[i]}, std::pair{phase2_request[i], &phase2_bytes[i]}})
        if (*bytes < 0) {
          waiting.push_back(request);
          bytes_of.push_back(bytes);
        }
    }
    if (waiting.empty()) break;
    size_t n = 0;
    const int r = comm_.wait_any(waiting, &n);
    *bytes_of[static_cast<size_t>(std::find(waiting.begin(), waiting.end(), r) - waiting.begin())] = static_cast<int64_t>(n);
  }
  for (size_t k = 0; k < K; ++k) QT_CHECK(summed[k] && phase2_left[k] == 0, "piece {} was not completed", k);
  comm_.complete_all();
}

}  // namespace qtrain
