// The gradient exchange's shared workspace: staging buffers, and encoding and decoding the payloads
// of a bucket's tensors back to back.
#include "exchange/algorithms/workspace.h"

#include <algorithm>

#include "comm/buffer_ops.h"
#include "quant/wire.h"

namespace qtrain::exchange {

Workspace::Workspace(Communicator& comm_, Device device_, std::unique_ptr<Context> ctx_, float scale_,
                     std::vector<ExchangeTensor> tensors_, std::vector<TensorPlan> plans_)
    : comm(comm_),
      device(device_),
      ctx(std::move(ctx_)),
      scale(scale_),
      tensors(std::move(tensors_)),
      plans(std::move(plans_)) {
  stats.bytes_sent_per_tensor.assign(tensors.size(), 0.0);
  if (device.is_cuda()) checks = std::make_unique<DeferredChecks>(*ctx);
}

namespace {
// A deferred check's tag: the tensor, the peer, and whether it was a decode.
uint64_t check_tag(int t, int peer, bool decode) {
  return (static_cast<uint64_t>(t) << 32) | (static_cast<uint64_t>(peer) << 1) | (decode ? 1u : 0u);
}
}  // namespace

void Workspace::tag_checks(int t, int peer, bool decode) {
  if (checks) checks->set_tag(check_tag(t, peer, decode));
}

std::string Workspace::describe_check(uint64_t tag) const {
  const auto t = static_cast<size_t>(tag >> 32);
  const auto peer = static_cast<int>((tag & 0xffffffffu) >> 1);
  const std::string name = t < tensors.size() ? tensors[t].name : "tensor " + std::to_string(t);
  return (tag & 1u) != 0
             ? fmt::format("gradient exchange, {}: the payload from rank {}", name, peer)
             : fmt::format("gradient exchange, {}: encoding rank {}'s piece for rank {}", name, comm.rank(), peer);
}

void Workspace::settle_checks() {
  // The communicator waits first: NCCL polls for a failed peer, where a plain synchronize would wait
  // forever on a collective that cannot end. The checks' copy back then finds the stream idle.
  comm.wait_stream(*ctx);
  if (checks && checks->pending() > 0) checks->settle([this](uint64_t tag) { return describe_check(tag); });
}

void Workspace::discard_checks() {
  if (!checks) return;
  // The step failed already: what the other checks say is not reported (the first error is).
  try {
    checks->settle();
  } catch (const Error&) {
  }
}

uint8_t* Workspace::device_bytes(Tensor& buffer, size_t bytes) {
  if (!buffer.defined() || buffer.nbytes() < bytes)
    buffer = Tensor::empty({static_cast<int64_t>(std::max<size_t>(bytes, 64) * 5 / 4)}, DType::u8, device);
  return buffer.data<uint8_t>();
}

uint8_t* Workspace::send_buffer(size_t bytes) {
  if (send_host.size() < bytes) send_host.resize(bytes);
  return device.is_cuda() ? device_bytes(send_dev, bytes) : send_host.data();
}

void Workspace::decode_from(int from_rank, std::span<const uint8_t> bytes, const std::vector<int>& ids, bool add,
                            const std::function<Span(int)>& where, bool owner_encoded) {
  // Transports deliver into host memory; CUDA decoders read device memory.
  const uint8_t* base = bytes.data();
  if (device.is_cuda() && !bytes.empty()) {
    uint8_t* dev = device_bytes(recv_dev, bytes.size());
    copy_from_host(*ctx, dev, bytes.data(), bytes.size());
    base = dev;
  }
  decode_payloads(
      from_rank, base, bytes.size(), ids, add, where,
      [&](int t, size_t cursor) { return payload_length(bytes, cursor, t, from_rank); }, owner_encoded,
      /*sender_spec=*/true);
}

void Workspace::decode_from_device(int from_rank, std::span<const uint8_t> bytes, const std::vector<int>& ids, bool add,
                                   const std::function<Span(int)>& where, bool owner_encoded) {
  // Each slot is its encoder's largest payload; the decoders read a size that varies on the device.
  decode_payloads(
      from_rank, bytes.data(), bytes.size(), ids, add, where,
      [&](int t, size_t) { return encoded_bound(t, where(t).length, owner_encoded); }, owner_encoded,
      /*sender_spec=*/true);
}

void Workspace::decode_payloads(int from_rank, const uint8_t* base, size_t size, const std::vector<int>& ids, bool add,
                                const std::function<Span(int)>& where, const std::function<size_t(int, size_t)>& length,
                                bool owner_encoded, bool sender_spec) {
  size_t cursor = 0;
  for (int t : ids) {
    const auto [begin, len] = where(t);
    if (len == 0) continue;  // empty stripes are never sent
    const size_t plen = length(t, cursor);
    const std::span<const uint8_t> payload{base + cursor, plen};
    const std::span<float> out{grad(t) + begin, static_cast<size_t>(len)};
    const TensorPlan& p = plan(t);
    // Payloads are self-describing; the owner's quantizer is the same method as the first one.
    const Quantizer& q = owner_encoded ? p.owner_q() : *p.quantizer;
    const int64_t column = sender_spec ? p.column_for(len, tensor(t).column) : 0;
    tag_checks(t, from_rank, /*decode=*/true);
    if (add)
      q.decode_add(*ctx, payload, len, out, column);
    else
      q.decode(*ctx, payload, len, out, column);
    cursor += plen;
  }
  if (cursor != size)
    input_error("gradient exchange: rank {} sent {} bytes more than its payloads describe", from_rank, size - cursor);
}

size_t Workspace::payload_length(std::span<const uint8_t> bytes, size_t cursor, int t, int from_rank) const {
  const std::string& name = tensor(t).name;
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

size_t Workspace::encoded_bound(int t, int64_t len, bool owner) const {
  const TensorPlan& p = plan(t);
  return (owner ? p.owner_q() : *p.quantizer).max_encoded_bytes(len, p.column_for(len, tensor(t).column));
}

size_t Workspace::piece_capacity(const std::vector<int>& ids, int s, int k) const {
  size_t c = 0;
  for (int t : ids) {
    const int64_t len = piece(t, s, k).length;
    // Either quantization of the piece: the first, or the owner's.
    if (len > 0) c += std::max(encoded_bound(t, len, false), encoded_bound(t, len, true));
  }
  return c;
}

size_t Workspace::piece_bytes(const std::vector<int>& ids, int s, int k, bool owner) const {
  size_t c = 0;
  for (int t : ids) {
    const int64_t len = piece(t, s, k).length;
    if (len > 0) c += encoded_bound(t, len, owner);
  }
  return c;
}

size_t Workspace::encode_piece(const std::vector<int>& ids, int s, int k, bool owner, uint8_t* out,
                               std::vector<double>& sent, int copies, bool slots) {
  size_t used = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    TensorPlan& p = plan(t);
    const auto [b, len] = piece(t, s, k);
    if (len == 0) continue;
    const int64_t col = p.column_for(len, tensor(t).column);
    StripedState& striped = p.as<StripedState>();
    QuantState& state =
        owner ? striped.owner[static_cast<size_t>(k)] : striped.stripes[static_cast<size_t>(s)][static_cast<size_t>(k)];
    const Quantizer& q = owner ? p.owner_q() : *p.quantizer;
    tag_checks(t, s, /*decode=*/false);
    const std::span<const float> in{grad(t) + b, static_cast<size_t>(len)};
    const std::span<uint8_t> slot{out + used, q.max_encoded_bytes(len, col)};
    const size_t bytes = slots ? q.encode_slot(*ctx, in, col, state, slot) : q.encode(*ctx, in, col, state, slot);
    used += bytes;
    sent[i] += static_cast<double>(bytes) * copies;
  }
  return used;
}

void Workspace::finish_sum(int t, float* x, int64_t n) {
  if (plan(t).combine == QuantCombine::vote)
    vote_buffer(*ctx, x, n);
  else if (scale != 1.0f)
    scale_buffer(*ctx, x, n, scale);
}

void Workspace::scale_piece(const std::vector<int>& ids, int k) {
  for (int t : ids) {
    const auto [b, len] = piece(t, comm.rank(), k);
    if (len > 0) finish_sum(t, grad(t) + b, len);
  }
}

}  // namespace qtrain::exchange
