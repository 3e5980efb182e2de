// cuDNN under the emulator (include/cudnn.h): handles and descriptors are bookkeeping; every call
// that would compute, or choose on cuDNN's behalf, returns CUDNN_STATUS_NOT_SUPPORTED. A CPU
// reimplementation would only agree with itself: cuDNN's algorithms, summation orders and RNN weight
// layout are its own, so its layers are checked on a GPU only (docs/gpu-checklist.md).
#include <cudnn.h>

#include <algorithm>

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

struct cudnnTensorStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int rank = 0;
  int dims[8] = {};
  int strides[8] = {};
};

struct cudnnFilterStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int k = 0, c = 0, h = 0, w = 0;
};

struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CONVOLUTION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

struct cudnnLRNStruct {
  unsigned n = 5;
  double alpha = 1e-4, beta = 0.75, k = 2.0;  // cuDNN's documented defaults
};

struct cudnnDropoutStruct {
  float dropout = 0.0f;
  unsigned long long seed = 0;
};

struct cudnnRNNStruct {
  cudnnRNNAlgo_t algo{};
  cudnnRNNMode_t cell{};
  cudnnRNNBiasMode_t bias{};
  cudnnDirectionMode_t dir{};
  cudnnRNNInputMode_t input_mode{};
  cudnnDataType_t type{}, math_precision{};
  cudnnMathType_t math{};
  int32_t input = 0, hidden = 0, projection = 0, layers = 0;
  uint32_t flags = 0;
};

struct cudnnRNNDataStruct {
  cudnnDataType_t type{};
  cudnnRNNDataLayout_t layout{};
  int max_length = 0, batch = 0, width = 0;
};

namespace {

template <typename T>
cudnnStatus_t create(T** desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  *desc = new T;
  return CUDNN_STATUS_SUCCESS;
}

template <typename T>
cudnnStatus_t destroy(T* desc) {
  delete desc;  // destroying null is a no-op in cuDNN too
  return CUDNN_STATUS_SUCCESS;
}

// What every computing call answers.
constexpr cudnnStatus_t kNotEmulated = CUDNN_STATUS_NOT_SUPPORTED;

}  // namespace

// ---- Handle ----

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) { return create(handle); }
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) { return destroy(handle); }
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUDNN_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}
const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED (cuDNN is not emulated: this path runs only on a GPU)";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

// ---- Tensor descriptors ----

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) { return create(desc); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) { return destroy(desc); }

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t desc, cudnnDataType_t type, int nbDims,
                                         const int dimA[], const int strideA[]) {
  if (!desc || !dimA || !strideA || nbDims < 1 || nbDims > 8) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < nbDims; ++i)
    if (dimA[i] <= 0 || strideA[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  desc->type = type;
  desc->rank = nbDims;
  std::copy(dimA, dimA + nbDims, desc->dims);
  std::copy(strideA, strideA + nbDims, desc->strides);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW) return kNotEmulated;  // the layers use NCHW only
  const int dims[4] = {n, c, h, w};
  const int strides[4] = {c * h * w, h * w, w, 1};
  return cudnnSetTensorNdDescriptor(desc, type, 4, dims, strides);
}

cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t desc, int nbDimsRequested, cudnnDataType_t* type,
                                         int* nbDims, int dimA[], int strideA[]) {
  if (!desc || !type || !nbDims || nbDimsRequested < 0) return CUDNN_STATUS_BAD_PARAM;
  *type = desc->type;
  *nbDims = desc->rank;
  const int n = std::min(nbDimsRequested, desc->rank);
  std::copy(desc->dims, desc->dims + n, dimA);
  std::copy(desc->strides, desc->strides + n, strideA);
  return CUDNN_STATUS_SUCCESS;
}

// ---- Filter, convolution, LRN, dropout and RNN descriptors ----

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) { return create(desc); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) { return destroy(desc); }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (!desc || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *desc = {type, format, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) { return create(desc); }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) { return destroy(desc); }
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  if (!desc || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  desc->pad_h = pad_h, desc->pad_w = pad_w, desc->stride_h = u, desc->stride_w = v;
  desc->dilation_h = dilation_h, desc->dilation_w = dilation_w, desc->mode = mode, desc->compute = computeType;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t mathType) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  desc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateLRNDescriptor(cudnnLRNDescriptor_t* desc) { return create(desc); }
cudnnStatus_t cudnnDestroyLRNDescriptor(cudnnLRNDescriptor_t desc) { return destroy(desc); }
cudnnStatus_t cudnnSetLRNDescriptor(cudnnLRNDescriptor_t desc, unsigned lrnN, double lrnAlpha, double lrnBeta,
                                    double lrnK) {
  if (!desc || lrnN < CUDNN_LRN_MIN_N || lrnN > CUDNN_LRN_MAX_N || lrnK < CUDNN_LRN_MIN_K ||
      lrnBeta < CUDNN_LRN_MIN_BETA)
    return CUDNN_STATUS_BAD_PARAM;
  *desc = {lrnN, lrnAlpha, lrnBeta, lrnK};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t* desc) { return create(desc); }
cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc) { return destroy(desc); }
cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float dropout,
                                        void* states, size_t stateSizeInBytes, unsigned long long seed) {
  if (!handle) return CUDNN_STATUS_NOT_INITIALIZED;
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  // A nonzero rate needs cuDNN's generator states, which are cuDNN's own: not emulated.
  if (dropout != 0.0f || states || stateSizeInBytes) return kNotEmulated;
  *desc = {dropout, seed};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t* desc) { return create(desc); }
cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc) { return destroy(desc); }
cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, cudnnRNNAlgo_t algo, cudnnRNNMode_t cellMode,
                                       cudnnRNNBiasMode_t biasMode, cudnnDirectionMode_t dirMode,
                                       cudnnRNNInputMode_t inputMode, cudnnDataType_t dataType,
                                       cudnnDataType_t mathPrec, cudnnMathType_t mathType, int32_t inputSize,
                                       int32_t hiddenSize, int32_t projSize, int32_t numLayers,
                                       cudnnDropoutDescriptor_t dropoutDesc, uint32_t auxFlags) {
  if (!desc || inputSize <= 0 || hiddenSize <= 0 || numLayers <= 0 || projSize < 0) return CUDNN_STATUS_BAD_PARAM;
  (void)dropoutDesc;
  *desc = {algo,     cellMode,  biasMode,   dirMode,  inputMode, dataType, mathPrec,
           mathType, inputSize, hiddenSize, projSize, numLayers, auxFlags};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t* desc) { return create(desc); }
cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc) { return destroy(desc); }
cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, cudnnDataType_t type,
                                        cudnnRNNDataLayout_t layout, int maxSeqLength, int batchSize, int vectorSize,
                                        const int seqLengthArray[], void* paddingFill) {
  if (!desc || !seqLengthArray || maxSeqLength <= 0 || batchSize <= 0 || vectorSize <= 0) return CUDNN_STATUS_BAD_PARAM;
  (void)paddingFill;
  *desc = {type, layout, maxSeqLength, batchSize, vectorSize};
  return CUDNN_STATUS_SUCCESS;
}

// ---- Computing calls: not emulated ----

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
                                            cudnnBatchNormMode_t) {
  return kNotEmulated;
}
cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t, cudnnBatchNormMode_t, const void*, const void*,
                                                     const cudnnTensorDescriptor_t, const void*,
                                                     const cudnnTensorDescriptor_t, void*,
                                                     const cudnnTensorDescriptor_t, const void*, const void*, double,
                                                     void*, void*, double, void*, void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t, cudnnBatchNormMode_t, const void*, const void*,
                                                      const cudnnTensorDescriptor_t, const void*,
                                                      const cudnnTensorDescriptor_t, void*,
                                                      const cudnnTensorDescriptor_t, const void*, const void*,
                                                      const void*, const void*, double) {
  return kNotEmulated;
}
cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t, cudnnBatchNormMode_t, const void*, const void*,
                                              const void*, const void*, const cudnnTensorDescriptor_t, const void*,
                                              const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t,
                                              void*, const cudnnTensorDescriptor_t, const void*, void*, void*, double,
                                              const void*, const void*) {
  return kNotEmulated;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
                                                    const cudnnFilterDescriptor_t, int*, int*, int*, int*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                     const cudnnFilterDescriptor_t, const cudnnConvolutionDescriptor_t,
                                                     const cudnnTensorDescriptor_t, const int, int*,
                                                     cudnnConvolutionFwdAlgoPerf_t*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                          const cudnnTensorDescriptor_t,
                                                          const cudnnConvolutionDescriptor_t,
                                                          const cudnnTensorDescriptor_t, const int, int*,
                                                          cudnnConvolutionBwdDataAlgoPerf_t*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                            const cudnnTensorDescriptor_t,
                                                            const cudnnConvolutionDescriptor_t,
                                                            const cudnnFilterDescriptor_t, const int, int*,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                      const cudnnFilterDescriptor_t, const cudnnConvolutionDescriptor_t,
                                                      const cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t,
                                                      size_t*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                           const cudnnTensorDescriptor_t,
                                                           const cudnnConvolutionDescriptor_t,
                                                           const cudnnTensorDescriptor_t, cudnnConvolutionBwdDataAlgo_t,
                                                           size_t*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                             const cudnnTensorDescriptor_t,
                                                             const cudnnConvolutionDescriptor_t,
                                                             const cudnnFilterDescriptor_t,
                                                             cudnnConvolutionBwdFilterAlgo_t, size_t*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*,
                                      const cudnnFilterDescriptor_t, const void*, const cudnnConvolutionDescriptor_t,
                                      cudnnConvolutionFwdAlgo_t, void*, size_t, const void*,
                                      const cudnnTensorDescriptor_t, void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnAddTensor(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*, const void*,
                             const cudnnTensorDescriptor_t, void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*,
                                           const void*, const cudnnTensorDescriptor_t, void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*,
                                             const cudnnTensorDescriptor_t, const void*,
                                             const cudnnConvolutionDescriptor_t, cudnnConvolutionBwdFilterAlgo_t, void*,
                                             size_t, const void*, const cudnnFilterDescriptor_t, void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t, const void*, const cudnnFilterDescriptor_t, const void*,
                                           const cudnnTensorDescriptor_t, const void*,
                                           const cudnnConvolutionDescriptor_t, cudnnConvolutionBwdDataAlgo_t, void*,
                                           size_t, const void*, const cudnnTensorDescriptor_t, void*) {
  return kNotEmulated;
}

cudnnStatus_t cudnnLRNCrossChannelForward(cudnnHandle_t, cudnnLRNDescriptor_t, cudnnLRNMode_t, const void*,
                                          const cudnnTensorDescriptor_t, const void*, const void*,
                                          const cudnnTensorDescriptor_t, void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnLRNCrossChannelBackward(cudnnHandle_t, cudnnLRNDescriptor_t, cudnnLRNMode_t, const void*,
                                           const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t,
                                           const void*, const cudnnTensorDescriptor_t, const void*, const void*,
                                           const cudnnTensorDescriptor_t, void*) {
  return kNotEmulated;
}

cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t, cudnnRNNDescriptor_t, size_t*) { return kNotEmulated; }
cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t, cudnnRNNDescriptor_t, int32_t, size_t, const void*, int32_t,
                                      cudnnTensorDescriptor_t, void**, cudnnTensorDescriptor_t, void**) {
  return kNotEmulated;
}
cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t, cudnnRNNDescriptor_t, cudnnForwardMode_t,
                                        cudnnRNNDataDescriptor_t, size_t*, size_t*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnRNNForward(cudnnHandle_t, cudnnRNNDescriptor_t, cudnnForwardMode_t, const int32_t[],
                              cudnnRNNDataDescriptor_t, const void*, cudnnRNNDataDescriptor_t, void*,
                              cudnnTensorDescriptor_t, const void*, void*, cudnnTensorDescriptor_t, const void*, void*,
                              size_t, const void*, size_t, void*, size_t, void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t, cudnnRNNDescriptor_t, const int32_t[], cudnnRNNDataDescriptor_t,
                                      const void*, const void*, cudnnRNNDataDescriptor_t, void*,
                                      cudnnTensorDescriptor_t, const void*, const void*, void*, cudnnTensorDescriptor_t,
                                      const void*, const void*, void*, size_t, const void*, size_t, void*, size_t,
                                      void*) {
  return kNotEmulated;
}
cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t, cudnnRNNDescriptor_t, cudnnWgradMode_t, const int32_t[],
                                         cudnnRNNDataDescriptor_t, const void*, cudnnTensorDescriptor_t, const void*,
                                         cudnnRNNDataDescriptor_t, const void*, size_t, void*, size_t, void*, size_t,
                                         void*) {
  return kNotEmulated;
}
