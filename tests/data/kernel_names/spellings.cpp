// Declarations shaped like real GPU kernels (same namespaces, template parameters and argument types),
// compiled with g++ to obtain genuine Itanium-mangled symbols for tests/unit/test_catalog.py.
// Kernels are ordinary functions for name mangling (__global__ does not change the symbol).
// Reproduce: g++ -std=c++17 -c spellings.cpp -o spellings.o && nm spellings.o | grep ' T '
#include <array>
#include <cstdint>
#include <type_traits>

namespace c10 { struct BFloat16 {}; }
struct __nv_bfloat16 {};
namespace cutlass { struct bfloat16_t {}; }

namespace at {
struct TensorIteratorBase {};
namespace native {
template <typename T> struct CUDAFunctor_add {};
template <int vec_size, typename func_t, typename array_t>
void vectorized_elementwise_kernel(int N, func_t f, array_t data) {}
template void vectorized_elementwise_kernel<8, CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3>>(
    int, CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3>);

// silu: the op's lambda is the 6th closure of its scope, inside the 1st, as AT_DISPATCH makes it.
namespace {
void silu_kernel(TensorIteratorBase& iter) {
  [&]() {
    [&]() {}(); [&]() {}(); [&]() {}(); [&]() {}(); [&]() {}();
    [&]() {
      auto f = [](c10::BFloat16 x) { return x; };
      vectorized_elementwise_kernel<8>(1, f, std::array<char*, 2>{});
    }();
  }();
}
}  // namespace
void use_silu(TensorIteratorBase& iter) { silu_kernel(iter); }

template <typename acc_t, typename factor_t, typename out_t, typename index_t> struct MeanOps {};
template <typename scalar_t, typename ops_t, typename index_t, typename out_scalar_t, int vt0, int input_vec_size>
struct ReduceOp {};
template <int nt, int output_vec_size, typename R> void reduce_kernel(R reduction) {}
template void reduce_kernel<512, 1, ReduceOp<float, MeanOps<float, float, float, float>, unsigned int, float, 4, 4>>(
    ReduceOp<float, MeanOps<float, float, float, float>, unsigned int, float, 4, 4>);

namespace {
template <unsigned int N> struct OpaqueType {};
template <typename T, typename IndexType, int n, int stride> struct CatArrInputTensorMetadata {};
template <typename IndexType, unsigned int MaxDims> struct TensorSizeStride {};
template <typename T, typename IndexType, int Dims, int batch_size, int stride_size>
void CatArrayBatchedCopy(T* output, CatArrInputTensorMetadata<T, IndexType, batch_size, stride_size> inputs,
                         TensorSizeStride<IndexType, 4u> os, int concatDim, IndexType dimStride) {}
}  // namespace
void use_cat() {
  CatArrayBatchedCopy<OpaqueType<2u>, unsigned int, 4, 64, 64>(nullptr, {}, {}, 0, 0u);
}
}  // namespace native
}  // namespace at

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, typename elem_type>
struct Flash_kernel_traits {};
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, bool Is_Q_in_regs_, bool Share_Q_K_smem_,
          typename elem_type, typename Base>
struct Flash_fwd_kernel_traits {};
namespace flash {
struct Flash_fwd_params {};
template <typename Kernel_traits, bool Is_causal, bool Is_local, bool Has_alibi, bool Is_even_MN, bool Is_even_K,
          bool Is_softcap, bool Split, bool Append_KV>
void flash_fwd_splitkv_kernel(Flash_fwd_params params) {}
template void flash_fwd_splitkv_kernel<
    Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t,
                            Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t>>,
    false, false, false, false, true, false, true, false>(Flash_fwd_params);
}  // namespace flash

namespace flashinfer { namespace norm {
template <uint32_t VEC_SIZE, typename T>
void FusedAddRMSNormKernel(T* input, T* residual, T* weight, uint32_t d, uint32_t stride_input,
                           uint32_t stride_residual, float weight_bias, float eps) {}
template void FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, uint32_t,
                                                       uint32_t, uint32_t, float, float);
}}  // namespace flashinfer::norm

template <typename T> struct cublasGemvTensorStridedBatched {};
template <typename I, typename A, typename X, typename Y, typename C> struct cublasGemvParamsEx {};
namespace internal { namespace gemvx {
template <typename T1, typename T2, typename T3, typename T4, typename T5, typename T6, bool T7, bool T8, bool T9,
          bool T10, int T11, bool T12, typename T13>
typename std::enable_if<!T7, void>::type kernel(T13 params) {}
using Params = cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const __nv_bfloat16>,
                                  cublasGemvTensorStridedBatched<const __nv_bfloat16>,
                                  cublasGemvTensorStridedBatched<__nv_bfloat16>, float>;
template void kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, false, true, true, false, 7,
                     false, Params>(Params);
}}  // namespace internal::gemvx
