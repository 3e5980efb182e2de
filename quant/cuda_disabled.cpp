// Builds without the CUDA toolkit (and the AddressSanitizer test build): the quantizers' CUDA
// launchers exist but throw, naming the method, so a CUDA span reaching them is a clear error (never a
// silent CPU fallback).
#include "framework/core/check.h"
#include "quant/kernels.h"

namespace qtrain::quant_detail {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(fmt::format("{}: a CUDA span was given but this qtrain was built without CUDA (QTRAIN_CUDA=OFF)", what));
}
}  // namespace

void cuda_zero_bytes(Context&, uint8_t*, size_t) { no_cuda("quantizer"); }
void cuda_copy_to_host(Context&, void*, const void*, size_t) { no_cuda("quantizer decode"); }
void cuda_write_header(Context&, uint8_t*, const WireHeader&) { no_cuda("quantizer encode"); }
void cast_encode_cuda(Context&, QuantMethod method, const float*, float*, uint8_t*, int64_t) {
  no_cuda(quant_method_name(method));
}
void cast_decode_cuda(Context&, QuantMethod method, const uint8_t*, float*, int64_t, bool) {
  no_cuda(quant_method_name(method));
}
void dettmers8_encode_cuda(Context&, Dettmers8Variant, const EncodeArgs&) { no_cuda("dettmers8"); }
void dettmers8_decode_cuda(Context&, Dettmers8Variant, float, const uint8_t*, float*, int64_t, bool) {
  no_cuda("dettmers8");
}
void onebit_encode_cuda(Context&, const EncodeArgs&, const wire::OnebitLayout&, const WireHeader&) { no_cuda("onebit"); }
void onebit_decode_cuda(Context&, const wire::OnebitLayout&, const uint8_t*, float*, bool) { no_cuda("onebit"); }
void qsgd_encode_cuda(Context&, const EncodeArgs&, const wire::QsgdLayout&, QsgdNorm, const WireHeader&) {
  no_cuda("qsgd");
}
void qsgd_decode_cuda(Context&, const wire::QsgdLayout&, const uint8_t*, float*, bool) { no_cuda("qsgd"); }
int64_t adaptive_encode_cuda(Context&, const EncodeArgs&, const wire::AdaptiveLayout&, double, int64_t, int64_t,
                             size_t) {
  no_cuda("adaptive");
}
void adaptive_decode_cuda(Context&, const wire::AdaptiveLayout&, const uint8_t*, float*, bool) { no_cuda("adaptive"); }
void topk_encode_cuda(Context&, const EncodeArgs&, int64_t, const WireHeader&) { no_cuda("topk"); }
void topk_decode_cuda(Context&, const uint8_t*, int64_t, int64_t, float*, bool) { no_cuda("topk"); }
void terngrad_encode_cuda(Context&, const EncodeArgs&, const wire::QsgdLayout&, float, const WireHeader&) {
  no_cuda("terngrad");
}
void terngrad_decode_cuda(Context&, const wire::QsgdLayout&, const uint8_t*, float*, bool) { no_cuda("terngrad"); }
void efsign_encode_cuda(Context&, const EncodeArgs&, const WireHeader&) { no_cuda("efsign"); }
void signsgd_encode_cuda(Context&, const EncodeArgs&, float, float, const WireHeader&) { no_cuda("signsgd"); }
void sign_decode_cuda(Context&, const uint8_t*, int64_t, float, float, float*, bool) { no_cuda("efsign/signsgd"); }
void randomk_encode_cuda(Context&, const EncodeArgs&, int64_t, const WireHeader&) { no_cuda("randomk"); }
void randomk_decode_cuda(Context&, const uint8_t*, int64_t, int64_t, PhiloxKey, float*, bool) { no_cuda("randomk"); }

void fp8_encode_cuda(Context&, const EncodeArgs&, Fp8Format, bool, const WireHeader&) { no_cuda("fp8"); }
void fp8_decode_cuda(Context&, Fp8Format, float, const uint8_t*, float*, int64_t, bool) { no_cuda("fp8"); }
void mx_encode_cuda(Context&, const EncodeArgs&, MxElement, bool, const wire::MxLayout&, const WireHeader&) {
  no_cuda("mx");
}
void mx_decode_cuda(Context&, MxElement, const wire::MxLayout&, const uint8_t*, float*, bool) { no_cuda("mx"); }
void nvfp4_encode_cuda(Context&, const EncodeArgs&, bool, const wire::Nvfp4Layout&, const WireHeader&) {
  no_cuda("nvfp4");
}
void nvfp4_decode_cuda(Context&, const wire::Nvfp4Layout&, float, const uint8_t*, float*, bool) { no_cuda("nvfp4"); }

}  // namespace qtrain::quant_detail
