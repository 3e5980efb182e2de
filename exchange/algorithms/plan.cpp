// Per-tensor plans of the gradient exchange, and the stripe, piece and random-stream conventions
// that every rank (and the tests' single-process simulation) must share.
#include "exchange/algorithms/plan.h"

#include <algorithm>

#include "exchange/algorithms/algorithm.h"
#include "quant/method.h"

namespace qtrain {

namespace exchange {

bool uses_columns(const QuantSpec& s) { return method_info(s.method).columnar(s); }

}  // namespace exchange

// Random-stream identities of the quantization states: distinct for every tensor, stripe and role.
uint64_t GradientExchange::state_id(int t, StreamRole role, int index) {
  return (static_cast<uint64_t>(t) << 24) | (static_cast<uint64_t>(role) << 20) | static_cast<uint64_t>(index);
}

uint64_t GradientExchange::piece_state_id(int t, bool owner, int stripe, int piece, int world_size) {
  if (piece == 0) return owner ? state_id(t, StreamRole::owner, 0) : state_id(t, StreamRole::stripe, stripe);
  const int64_t index = owner ? piece : int64_t{piece} * world_size + stripe;
  QT_CHECK(index < (int64_t{1} << 20),
           "{} pieces of {} stripes exceed the random-stream ids; raise communication.piece_mb", piece + 1, world_size);
  return state_id(t, owner ? StreamRole::owner_piece : StreamRole::stripe_piece, static_cast<int>(index));
}

int GradientExchange::piece_count(const std::vector<int64_t>& stripe_begin, int64_t unit, int64_t piece_values) {
  int64_t widest = 0;  // units
  for (size_t s = 0; s + 1 < stripe_begin.size(); ++s)
    widest = std::max(widest, (stripe_begin[s + 1] - stripe_begin[s]) / unit);
  const int64_t per_piece = std::max<int64_t>(1, piece_values / unit);
  if (piece_values <= 0 || widest <= per_piece) return 1;
  const int64_t pieces = (widest + per_piece - 1) / per_piece;
  QT_CHECK(pieces < Communicator::kMaxPointToPointTag / 2, "{} pieces per stripe; raise communication.piece_mb",
           pieces);
  return static_cast<int>(pieces);
}

std::vector<int64_t> GradientExchange::piece_bounds(int64_t begin, int64_t end, int64_t unit, int pieces) {
  const int64_t units = (end - begin) / unit;
  std::vector<int64_t> b(static_cast<size_t>(pieces) + 1);
  for (int k = 0; k <= pieces; ++k) b[static_cast<size_t>(k)] = begin + units * k / pieces * unit;
  return b;
}

int64_t GradientExchange::stripe_unit(const QuantSpec& spec, int64_t column) {
  return exchange::uses_columns(spec) ? std::max<int64_t>(1, column) : 1;
}

std::vector<int64_t> GradientExchange::stripe_bounds(int64_t numel, int64_t unit, int world_size) {
  const int64_t units = numel / unit;
  QT_CHECK(units * unit == numel, "a stripe unit of {} does not divide {} values", unit, numel);
  std::vector<int64_t> b(static_cast<size_t>(world_size) + 1);
  for (int s = 0; s <= world_size; ++s) b[static_cast<size_t>(s)] = units * s / world_size * unit;
  return b;
}

int64_t GradientExchange::encode_column(const QuantSpec& spec, int64_t length, int64_t column) {
  return exchange::uses_columns(spec) && column > 0 && length % column == 0 ? column : 1;
}

LowRankShape GradientExchange::low_rank_shape(const QuantSpec& spec, int64_t rows, int64_t numel) {
  LowRankShape s;
  if (rows <= 0 || numel <= 0) return s;  // a vector or a scalar
  QT_CHECK(numel % rows == 0, "a leading dimension of {} does not divide {} values", rows, numel);
  s.rows = rows;
  s.cols = numel / rows;
  s.rank = static_cast<int>(std::min<int64_t>({rows, s.cols, spec.integer("rank")}));
  // powerSGD_hook's _should_compress, in doubles: the products of large matrices do not overflow.
  const double compressed = static_cast<double>(rows + s.cols) * s.rank;
  s.compressed = compressed * spec.number("min_compression_rate") < static_cast<double>(rows) * s.cols;
  return s;
}

namespace exchange {

TensorPlan make_plan(const ExchangeTensor& x, int index, const QuantSpec& spec, ReduceAlgorithm algorithm,
                     const PlanContext& pc) {
  TensorPlan p;
  p.spec = spec;
  p.algorithm = algorithm;
  exchange_algorithm(algorithm).plan(p, x, index, pc);
  return p;
}

}  // namespace exchange
}  // namespace qtrain
