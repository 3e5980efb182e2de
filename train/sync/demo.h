// demo: DeMo, Decoupled Momentum Optimization (Peng, Quesnelle, Kingma 2024, arXiv 2411.19870; the
// optimizer of Nous Research's DisTrO and Psyche). No gradient is all-reduced. Each replica keeps a
// momentum of its own and sends only its fast components; every replica applies the same update from
// them. Algorithm 1 of the paper, per step:
//
//   m <- beta m + g                  this rank's gradient into this rank's momentum (sync.momentum)
//   q <- ExtractFastComponents(m)    per chunk of sync.chunk values of each tensor, the orthonormal
//                                    DCT-II, keeping its sync.topk coefficients of largest magnitude
//                                    (as values, or with sync.sign as signs with one scale per chunk)
//   m <- m - IDCT(q)                 what was sent leaves the momentum: the momentum is the error feedback
//   Q <- Synchronize(q)              an allgather of every rank's (index, value) pairs; every rank decodes
//                                    all of them, in rank order, into the sum of their inverse DCTs
//   theta <- theta - lr sign(Q)      the paper's runs (and its reference code) apply signum: the sign
//
// The last line is the run's optimizer, which must be plain SGD (no momentum: DeMo's momentum is the
// one above): the strategy writes sign(Q) into the gradient arena, SGD takes the step with the run's
// learning rate and schedule, and optimizer.weight_decay decays the parameters as the reference code's
// decoupled weight decay does (theta (1 - lr wd), up to the order of the two roundings). The replicas
// are bit-identical after every step; each rank's momentum is its own, in its own checkpoint file.
// The arithmetic, and why CPU and CUDA agree bit for bit: demo_codec.h; the payload: demo_wire.h.
#pragma once

#include <memory>

#include "train/sync/sync_strategy.h"

namespace qtrain {

std::unique_ptr<SyncStrategy> make_demo_sync(SyncSetup& setup);

}  // namespace qtrain
