"""What the kernel catalog's tests share: one real kernel name per rule family with the library, category and
friendly name it must get, the folders of real names and traces, and two small helpers."""

from __future__ import annotations

import csv
from pathlib import Path

from kernelscope.analyze.costs.catalog import KernelInfo

NAMES = Path(__file__).resolve().parents[1] / "data" / "kernel_names"
KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto"


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _known(info: KernelInfo) -> bool:
    return info.library != "unknown" and info.category != "other"


# ---------------------------------------------------------------- one line per rule family
# (name, library, category, friendly name). A new kernel family is one rule in kernel_catalog.toml plus
# one line here; test_every_rule_has_a_line keeps the two in step.
FAMILIES = [
    ("Memcpy HtoD (Pageable -> Device)", "CUDA / HIP", "memcpy", "Memcpy Host to Device (Pageable → Device)"),
    ("Memset (Device)", "CUDA / HIP", "memset", "Memset (Device)"),
    ("[CUDA memcpy Device-to-Host]", "CUDA", "memcpy", "Memcpy Device to Host"),
    ("[CUDA memset]", "CUDA", "memset", "Memset"),
    ("ks_rmsnorm_fused_add", "kernelscope engine", "norm", "ks_rmsnorm_fused_add"),
    ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT", "cuBLASLt", "GEMM", "cuBLASLt GEMM (BF16, tile 128x8x64, split-K)"),
    ("nvjet_sm100_qqtst_128x64_64x8_2x1_2cta_v_bz_Avec32UE8M0_Bvec32UE8M0_TNT", "cuBLASLt", "GEMM",
     "cuBLASLt GEMM (qqtst, tile 128x64x64)"),
    ("nvjet_future_layout", "cuBLASLt", "GEMM", "cuBLASLt GEMM"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float, "
     "__nv_bfloat16, __nv_bfloat16, true, false, false, false>(cublasLt::cublasSplitKParams<float>)",
     "cuBLASLt", "GEMM", "cuBLASLt Split-K Reduce (FP32 → BF16)"),
    ("void cublasLt::epilogue::impl::globalKernel<8, 32, float, float>(cublasLt::epilogue::Params)",
     "cuBLASLt", "other", "cuBLASLt epilogue"),
    ("std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
     "float, (bool)0, (bool)1, (bool)1, (bool)0, (int)7, (bool)0, cublasGemvParamsEx<int, "
     "cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<const __nv_bfloat16>, "
     "cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)", "cuBLAS", "GEMV", "GEMV (BF16, template=7)"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
     "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, float>, float, float)",
     "cuBLAS", "GEMV", "GEMV (FP32, transposed)"),
    ("void gemmk1_kernel<int, float, 256, 5, true, false, false, false, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float, 0>(cublasGemmk1Params)",
     "cuBLAS", "GEMM", "GEMM K=1 (FP32)"),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams)",
     "cuBLAS", "GEMM", "GEMM small-N (TN, FP32)"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nchw_tilesize64x64x64_stage4_warpsize2x2x1",
     "cuDNN", "convolution", "cuDNN Convolution Forward (sm80)"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "cuBLAS", "GEMM", "cuBLAS GEMM (BF16, TN, tile 128x128x64)"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "cuBLAS", "GEMM",
     "cuBLAS GEMM (BF16, s16816gemm, tile 128x64)"),
    ("void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensor<float const>, cublasGemvTensor<float> > >"
     "(cublasDotParams<cublasGemvTensor<float const>, cublasGemvTensor<float> >)", "cuBLAS", "reduction", "cuBLAS dot"),
    ("void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<(int)8>, cute::C<(int)128>>, (int)5, "
     "(int)256, (int)1, (bool)0, (bool)1, cutlass::bfloat16_t, float, cutlass::arch::Sm90>>(T1::Params)",
     "FlashAttention 3", "attention-combine", "FA3 Split-KV Combine (BF16)"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
     "(int)2, cute::tuple<cute::C<(int)1>, cute::C<(int)1>, cute::C<(int)1>>, cute::tuple<cute::C<(int)128>, "
     "cute::C<(int)176>, cute::C<(int)64>>, (int)64, cutlass::bfloat16_t, float, cutlass::arch::Sm90, (bool)1>>>>(T1::Params)",
     "FlashAttention 3", "attention", "FA3 Forward (BF16, hdim 64, tile 128x176)"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90<"
     "(int)2, cutlass::bfloat16_t>>>>(T1::Params)", "FlashAttention 3", "attention", "FA3 Backward (BF16)"),
    ("void flash::prepare_varlen_num_blocks_kernel<(int)8, (bool)1>(int, int, int, const int *, int *, bool, int)",
     "FlashAttention 3", "attention", "FA3 Scheduler Prep (varlen blocks)"),
    ("void flash::flash_fwd_splitkv_mla_combine_kernel<cutlass::bfloat16_t, 512, 64, 64>(Flash_fwd_mla_params)",
     "FlashMLA", "attention-combine", "FlashMLA Split-KV Combine (BF16)"),
    ("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512>, "
     "true, SharedStorageMLA<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512> > >"
     "(Flash_fwd_mla_params)", "FlashMLA", "attention",
     "FlashMLA flash_fwd_splitkv_mla_kernel (BF16, hdim 576)"),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, "
     "(bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, cutlass::bfloat16_t>>, "
     "(int)4, (int)3, (bool)1>(flash::Flash_fwd_params)",
     "FlashAttention 2", "attention-combine", "Flash Split-KV Combine (BF16, hdim 128)"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 256, 4, false, false, cutlass::half_t, "
     "Flash_kernel_traits<64, 64, 256, 4, cutlass::half_t> >, false, false, false, false, true, true, true, false>"
     "(flash::Flash_fwd_params)", "FlashAttention 2", "attention", "Flash Split-KV Forward (FP16, hdim 64)"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, true, false, "
     "false, false, true, true, false>(pytorch_flash::Flash_fwd_params)",
     "FlashAttention 2", "attention", "Flash Forward"),
    ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, "
     "false, cutlass::bfloat16_t> >(flash::Flash_bwd_params)",
     "FlashAttention 2", "attention", "Flash Backward dq_dk_dv_loop_seqk_parallel (BF16)"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
     "PyTorch ATen", "attention", "Memory-Efficient Attention (BF16)"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
     "cuDNN", "attention", "cuDNN Flash Attention Forward (hdim 128, tile 64x128, sm90)"),
    ("cudnn_generated_fort_native_layernorm_fprop_sm90_kernel0_0", "cuDNN", "norm", "cuDNN Generated layernorm Kernel"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
     "(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)",
     "cuDNN", "copy/cast", "cuDNN Layout Transform"),
    ("void cudnn::cnn::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int)",
     "cuDNN", "convolution", "cuDNN Convolution"),
    ("void cudnn::ops::scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, float*, float)",
     "cuDNN", "elementwise", "cuDNN Tensor scale"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x3_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x3_tn_align8::Params)",
     "CUTLASS", "GEMM", "CUTLASS GEMM (BF16, s16816gemm, tile 128x256x32, TN, relu)"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, "
     "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>, cutlass::gemm::KernelTmaWarpSpecializedCooperative>, "
     "cute::tuple<cute::C<128>, cute::C<256>, cute::C<64>>, cutlass::float_e4m3_t, cute::tuple<long, cute::C<1>, long>>>"
     ">(cutlass::gemm::kernel::GemmUniversal::Params)", "CUTLASS", "GEMM", "CUTLASS GEMM (FP8 E4M3, tile 128x256x64)"),
    ("void cutlass::device_kernel<cutlass::reduction::kernel::ReduceSplitK<float>>(T1::Params)",
     "CUTLASS", "other", "CUTLASS Kernel"),
    ("void deep_gemm::sm90_fp8_paged_mqa_logits<64, 128, 4, 256>(unsigned int, unsigned long)",
     "DeepGEMM", "attention", "DeepGEMM MQA Logits"),
    ("void deep_gemm::transpose_fp32<128, 64>(float*, float*, unsigned int)", "DeepGEMM", "copy/cast",
     "DeepGEMM Layout Helper"),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 7168u, 4096u, 1u, 128u, 128u, 128u, 1u, 4u, 8u, 2u, "
     "(deep_gemm::GemmType)1, cutlass::bfloat16_t>(float*, int*, unsigned int)", "DeepGEMM", "GEMM",
     "DeepGEMM GEMM (FP8, sm90)"),
    ("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
     "DeepEP", "MoE routing", "DeepEP Dispatch Layout"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*)",
     "DeepEP", "MoE dispatch", "DeepEP Dispatch (intranode)"),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*, void*, int*, void const*, long const*, int*, int)",
     "DeepEP", "MoE combine", "DeepEP Combine (low-latency internode)"),
    ("void deep_ep::internode::notify_something<8>(int*)", "DeepEP", "communication", "DeepEP Helper"),
    # DeepSeek's own profiles (deepseek-ai/profile-data, train.json: DeepSeek-V3 training on H800) spell DeepEP's
    # namespace dpsk::ep and name their in-house grouped GEMMs dpsk::grouped_gemm.
    ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*, "
     "int4 const*, float const*, int4 const*)", "DeepEP", "MoE combine", "DeepEP Combine (internode)"),
    ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, "
     "dpsk::ep::internode::SourceMeta*, int4 const*, float const*)", "DeepEP", "MoE dispatch",
     "DeepEP Dispatch (internode)"),
    ("void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*, int*, int const*)",
     "DeepEP", "MoE dispatch", "DeepEP Notify Dispatch (internode)"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*, int const*)",
     "DeepEP", "communication", "DeepEP Helper"),
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>"
     "(dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel::Params)", "DeepSeek in-house", "GEMM",
     "DeepSeek Grouped GEMM (m_grouped_fp8_ptp128c)"),
    ("void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(unsigned char const*, unsigned char*, int, "
     "int, int, int)", "DeepSeek in-house", "copy/cast", "DeepSeek GEMM Helper (transpose)"),
    # cuDNN 8.9's implicit-GEMM convolution with its data type around scudnn (harryjmoss/particle_transformer, A100).
    ("_5x_cudnn_ampere_fp16_scudnn_fp16_128x32_relu_small_nn_v1", "cuDNN", "convolution",
     "cuDNN Implicit-GEMM Convolution (ampere, FP16, tile 128x32)"),
    # FlashAttention 3's first releases: compute_attn_ws with FA2-style traits (headdim, blockM, blockN, …, dtype).
    ("void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t, "
     "128>, true, flash::SingleTileScheduler, flash::FixedSeqLenTraits>(flash::CollectiveMainloopFwd<"
     "Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t, 128>, true>::Params)",
     "FlashAttention 3", "attention", "FA3 Forward (BF16, hdim 192, tile 128x128)"),
    ("void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
     "__nv_bfloat16, float, unsigned int, 7168u, 1u, 1u, 4u, 16u, layer_norm::Kernel_traits_base<7168u, "
     "__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 128u> > >"
     "(layer_norm::FwdParams)", "Apex / FlashAttention LayerNorm", "norm", "Fast LayerNorm Forward (BF16)"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     "NCCL", "communication", "NCCL AllReduce (Sum, BF16)"),
    ("ncclDevFunc_Generic()", "NCCL", "communication", "NCCL Kernel"),
    ("fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
     "TensorRT-LLM", "attention", "TRT-LLM Gen Attention (BF16, hdim 128, sm100)"),
    ("fmha_v2_flash_attention_bf16_64_128_S_q_kv_128_causal_sm90_kernel", "TensorRT-LLM", "attention",
     "TRT-LLM FMHA (BF16)"),
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>(int)",
     "TensorRT-LLM", "communication", "TRT-LLM All-Reduce"),
    ("void tensorrt_llm::kernels::moe_topk_gating_kernel<float, 8>(float const*, int*, int)",
     "TensorRT-LLM", "MoE routing", "TRT-LLM moe_topk_gating_kernel"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<(unsigned int)8, __nv_bfloat16>(T2 *, T2 *, T2 *, unsigned int, "
     "unsigned int, unsigned int, float, float)", "FlashInfer", "norm", "Fused Add + RMSNorm (BF16, vec8)"),
    ("void flashinfer::norm::LayerNormKernel<__nv_bfloat16>(__nv_bfloat16*, float)", "FlashInfer", "norm",
     "LayerNorm (BF16)"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<(bool)0, (unsigned int)128, (unsigned int)8, "
     "(unsigned int)16, __nv_bfloat16, long>(T5 *, T5 *, T5 *, T5 *, float *, T6 *)", "FlashInfer", "rope",
     "Apply RoPE to Q/K (cos/sin cache, BF16)"),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu<float>>(T1 *, const T1 *, int)",
     "FlashInfer", "activation", "SiLU-and-Multiply (BF16)"),
    ("void flashinfer::MergeStatesKernel<8u, 16u, 2u, 4u, __nv_bfloat16, __nv_bfloat16>(__nv_bfloat16*, float*)",
     "FlashInfer", "attention-combine", "Merge Attention States (BF16)"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u, "
     "flashinfer::DefaultAttention<false, false, false, false>, __nv_bfloat16>(__nv_bfloat16*)",
     "FlashInfer", "attention", "FlashInfer Batch Decode, paged KV (BF16)"),
    ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)2, 4u, true, float, "
     "int>(float*, int*)", "FlashInfer", "sampling", "FlashInfer TopKTopPSamplingFromProb"),
    ("void flashinfer::quantization::PackBitsKernel<true, bool>(bool*, unsigned char*, long)",
     "FlashInfer", "quantization", "FlashInfer PackBitsKernel"),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, "
     "float, int, int)", "vLLM", "norm", "Fused Add + RMSNorm (BF16, vec8)"),
    ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
     "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, float, "
     "int, int)", "vLLM", "norm", "Fused Add + RMSNorm (BF16, vec8)"),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*)",
     "vLLM", "rope", "Rotary Embedding (BF16)"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(c10::BFloat16*, "
     "c10::BFloat16 const*, int)", "vLLM", "activation", "SiLU-and-Multiply (BF16)"),
    ("void vllm::activation_kernel<c10::Half, &vllm::gelu_new_kernel<c10::Half> >(c10::Half*, c10::Half const*, int)",
     "vLLM", "activation", "GELU (new) Activation (FP16)"),
    ("void vllm::paged_attention_v2_reduce_kernel<c10::BFloat16, 128, 128, 512>(c10::BFloat16*, float const*)",
     "vLLM", "attention-combine", "Paged Attention v2 Reduce (BF16)"),
    ("void vllm::paged_attention_v1_kernel<c10::BFloat16, c10::BFloat16, 128, 16, 128, (vllm::Fp8KVCacheDataType)0, "
     "false>(c10::BFloat16*, c10::BFloat16 const*)", "vLLM", "attention",
     "Paged Attention v1 (BF16, hdim 128, block 16)"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
     "(__nv_bfloat16 const*, __nv_bfloat16 const*)", "vLLM", "copy/cast",
     "KV Cache Write (reshape_and_cache_flash, BF16)"),
    ("void vllm::moe::topkGatingSoftmax<4, 64, 4, 16, int>(float const*, bool const*, float*, int, int*)",
     "vLLM", "MoE routing", "MoE Routing (topkGatingSoftmax)"),
    ("void vllm::moe::moe_sum_kernel<c10::BFloat16, 2>(c10::BFloat16*, c10::BFloat16 const*, int)",
     "vLLM", "MoE combine", "MoE Sum (BF16)"),
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*)",
     "vLLM", "quantization", "Quantize (dynamic_per_token_scaled_fp8_quant_kernel)"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)",
     "vLLM", "communication", "Custom All-Reduce (1stage, BF16)"),
    ("void marlin::Marlin<256, 1, 8, 8, 4, 8>(int4 const*, int4 const*, int4*)", "vLLM", "GEMM",
     "Marlin Quantized GEMM"),
    ("void per_token_group_quant_8bit_kernel<__nv_bfloat16, c10::Float8_e4m3fn, false>(__nv_bfloat16 const*, void*)",
     "sgl-kernel", "quantization", "Per-Token-Group Quantize (8-bit, from BF16)"),
    ("void act_and_mul_kernel<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16 const*, int)", "sgl-kernel", "activation",
     "Activation-and-Multiply (BF16)"),
    ("void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, unsigned long)",
     "sgl-kernel", "MoE routing", "MoE Routing (moe_align_block_size_kernel)"),
    ("void moe_sum_reduce_kernel<__nv_bfloat16>(__nv_bfloat16 const*, __nv_bfloat16*, int)",
     "sgl-kernel", "MoE combine", "MoE Sum (BF16)"),
    ("rmsnorm_split_col_kernel", "sgl-kernel", "norm", "RMSNorm (split_col_kernel)"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "Triton", "norm",
     "Inductor Reduction (fused__to_copy_add_mean_mul_pow_rsqrt_0)"),
    ("triton_per_fused__softmax_amax_exp_sub_sum_3", "Triton", "softmax",
     "Inductor Persistent Reduction (fused__softmax_amax_exp_sub_sum_3)"),
    ("triton_poi_fused_clamp_sub_0", "Triton", "elementwise", "Inductor Pointwise (fused_clamp_sub)"),
    ("_fwd_kernel_stage2", "Triton", "attention-combine", "Decode Attention Stage 2 (Triton)"),
    ("_fwd_grouped_kernel_stage1", "Triton", "attention", "Attention Forward (Triton _fwd_grouped_kernel_stage1)"),
    ("fused_moe_kernel", "Triton", "GEMM", "Fused MoE Grouped GEMM (Triton)"),
    ("moe_align_block_size_stage1", "Triton", "MoE routing", "MoE Align Block Size (Triton)"),
    ("write_req_to_token_pool_triton", "Triton", "copy/cast", "SGLang write_req_to_token_pool_triton (Triton)"),
    ("void at::native::elementwise_kernel_with_index<int, at::native::arange_cuda_out(const c10::Scalar &, "
     "const c10::Scalar &, const c10::Scalar &, at::Tensor &)::[lambda() (instance 1)]::operator ()() const::"
     "[lambda() (instance 3)]::operator ()() const::[lambda(long) (instance 1)]>(T1, T2, function_traits<T2>::result_type *)",
     "PyTorch ATen", "elementwise", "Arange (INT32)"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase &)"
     "::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)",
     "PyTorch ATen", "copy/cast", "Cast to BF16 (from FP32, vec4)"),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
     "at::native::templates::cuda::exponential_kernel(at::TensorIteratorBase&, double, at::CUDAGeneratorImpl*)"
     "::{lambda()#1}::operator()() const::{lambda(float)#1}>(long, at::PhiloxCudaState)",
     "PyTorch ATen", "sampling", "Random Exponential Fill (FP32)"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
     "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
     "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
     "std::array<char*, 3ul>)", "PyTorch ATen", "elementwise", "Elementwise Multiply (BF16, vec4)"),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
     "unsigned int, long, (int)4, (int)4>>(T3)", "PyTorch ATen", "reduction", "ArgMax Reduction (FP32)"),
    ("void at::native::<unnamed>::CatArrayBatchedCopy_vectorized<at::native::<unnamed>::OpaqueType<(unsigned int)2>, "
     "unsigned int, (int)3, (int)128, (int)1, (int)16, (int)8>(char *, at::native::<unnamed>::CatArrInputTensorMetadata"
     "<T1, T2, T4, T5>, at::native::<unnamed>::TensorSizeStride<T2, (unsigned int)4>, int, T2)",
     "PyTorch ATen", "concat", "Cat Batched Copy (vec, 2-byte, batch 128)"),
    ("void at::native::index_elementwise_kernel<(int)128, (int)4, void at::native::gpu_index_kernel<void "
     "at::native::index_put_kernel_impl<at::native::OpaqueType<(int)2>>(at::TensorIterator &, c10::ArrayRef<long>, "
     "c10::ArrayRef<long>)::[lambda(char *, const char *, long) (instance 1)]>(at::TensorIteratorBase &, "
     "c10::ArrayRef<long>, c10::ArrayRef<long>, const T1 &, bool)::[lambda(int) (instance 1)]>(long, T3)",
     "PyTorch ATen", "index/gather/scatter", "Index Put (2-byte)"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>"
     "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>)", "PyTorch ATen", "index/gather/scatter",
     "Index Select (BF16, large index)"),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
     "PyTorch ATen", "index/gather/scatter", "Vectorized Gather (16-byte)"),
    ("void at::native::_scatter_gather_elementwise_kernel<128, 8, at::native::_cuda_scatter_gather_internal_kernel<true, "
     "at::native::OpaqueType<4>, long>::operator()<at::native::ReduceAdd>(at::TensorIterator&)::{lambda(int)#1}>(int)",
     "PyTorch ATen", "index/gather/scatter", "Scatter/Gather (scatter)"),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>(long const*, "
     "float const*, float*, int, long, int)", "PyTorch ATen", "index/gather/scatter",
     "Embedding (embedding_backward_feature_kernel)"),
    ("void at::native::(anonymous namespace)::indexing_backward_kernel<c10::BFloat16, 8>(long const*, long const*)",
     "PyTorch ATen", "index/gather/scatter", "Indexing (indexing_backward_kernel)"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, (int)1, (bool)0>(at::cuda::detail::TensorInfo<const T1, "
     "T2>, T2, T2, bool, T2, T2)", "PyTorch ATen", "sort/topk", "TopK Gather (FP32, single-block)"),
    ("void at::native::bitonicSortKVInPlace<(int)-2, (int)-1, (int)16, (int)16, long, long, at::native::LTOp<long, "
     "(bool)1>, unsigned int>(at::cuda::detail::TensorInfo<T5, T8>, T8, T8, T8)", "PyTorch ATen", "sort/topk",
     "Bitonic Sort KV In-Place (INT64)"),
    ("void at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::detail::scan::policy_hub<long, long, long, "
     "unsigned int, std::plus<long>>::Policy1000, const long *, long *>(T2, T3, T4, int, T5, T6, T7)",
     "PyTorch ATen", "reduction", "CUB Prefix Scan (INT64)"),
    ("void at::cuda::kernelHistogram1D<float, float, long, 1, 2, -1, (at::cuda::CUDAHistogramMemoryType)0>"
     "(at::cuda::detail::TensorInfo<float, long>)", "PyTorch ATen", "reduction", "Histogram (FP32)"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
     "PyTorch ATen", "softmax", "Softmax (FP32, log)"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
     "PyTorch ATen", "norm", "LayerNorm Forward (vectorized) (BF16)"),
    ("void at::cuda::detail::prepare_grouped_gemm_data<cutlass::bfloat16_t, cutlass::bfloat16_t, cutlass::bfloat16_t, "
     "float, cute::tuple<int, int, int> >(cutlass::bfloat16_t*)", "PyTorch ATen", "GEMM", "Grouped GEMM Setup (BF16)"),
    ("void at::native::triu_tril_kernel<c10::BFloat16, int, false, 4, true>(at::cuda::detail::TensorInfo<c10::BFloat16, "
     "int>)", "PyTorch ATen", "elementwise", "Triangular Mask (BF16)"),
    ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 4, bool>"
     "(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>)", "PyTorch ATen", "elementwise",
     "Dropout (BF16)"),
    ("void at::native::(anonymous namespace)::sampleMultinomialOnce<float, float>(long*, long, int, float const*)",
     "PyTorch ATen", "sampling", "Multinomial Sampling (FP32)"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>>(int)",
     "PyTorch ATen", "elementwise", "Multi-Tensor Apply"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*)",
     "PyTorch ATen", "reduction", "Loss Reduction"),
    ("void at::native::im2col_kernel<float>(long, float const*, long, long, float*)", "PyTorch ATen", "convolution",
     "Convolution Helper (im2col)"),
    ("void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame<float, float>(int, float, float, bool)",
     "PyTorch ATen", "index/gather/scatter", "ATen upsample_bilinear2d_out_frame"),
    # A plain identifier names no library unless it says so: Triton kernels and vendor kernels look alike.
    ("rms_norm_kernel", "unknown", "norm", "rms_norm_kernel"),
    ("moe_combine_triton_kernel", "Triton", "MoE combine", "moe_combine_triton_kernel"),
    # vLLM's ROCm split-K GEMV, as its source names it (csrc/rocm/skinny_gemms.cu); not in the corpus.
    ("void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 4>(int, int, int, __hip_bfloat16 const*, "
     "__hip_bfloat16 const*, __hip_bfloat16*, int, int)", "vLLM (ROCm)", "GEMV", "vLLM ROCm Split-K GEMV"),
    # CUTLASS device templates by kernel class (Nsight spells the whole template)
    ("void cutlass::Kernel<cutlass::gemm::kernel::GemmFpAIntB<cutlass::gemm::threadblock::DqMmaMultistage<>>>"
     "(cutlass::gemm::kernel::GemmFpAIntB<>::Params)", "CUTLASS", "GEMM", "CUTLASS GEMM (GemmFpAIntB)"),
    ("void cutlass::Kernel2<cutlass::conv::kernel::ImplicitGemmConvolution<>>(cutlass::conv::kernel::"
     "ImplicitGemmConvolution<>::Params)", "CUTLASS", "convolution", "CUTLASS Convolution (ImplicitGemmConvolution)"),
    # CCCL called directly
    ("void cub::CUB_200200_890_NS::DeviceRadixSortOnesweepKernel<cub::CUB_200200_890_NS::DeviceRadixSortPolicy<long, "
     "long, unsigned int>::Policy900, false, long, long, unsigned int, int>(int*, int*)", "CUB (CCCL)", "sort/topk",
     "CUB DeviceRadixSortOnesweepKernel"),
    ("void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__parallel_for::ParallelForAgent<thrust::cuda_cub::"
     "__fill::functor<thrust::device_ptr<float>, float>, unsigned long>, thrust::cuda_cub::__fill::functor<thrust::"
     "device_ptr<float>, float>, unsigned long>(thrust::cuda_cub::__fill::functor<thrust::device_ptr<float>, float>, "
     "unsigned long)", "Thrust (CCCL)", "memset", "Thrust _kernel_agent (memset)"),
    ("void gen_sequenced<curandStateXORWOW, float, int, &curand_uniform_noargs<curandStateXORWOW>, rng_config<"
     "curandStateXORWOW, (curandOrdering)101>>(curandStateXORWOW*, float*, unsigned long, unsigned long, int)",
     "cuRAND", "sampling", "cuRAND gen_sequenced"),
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "PyTorch ATen", "synchronization", "Spin (torch.cuda._sleep)"),
    ("cudapy::__main__::add_kernel$241(Array<float, 1, C, mutable, aligned>, Array<float, 1, C, mutable, aligned>)",
     "Numba (CUDA)", "elementwise", "Numba add_kernel"),
    ("cupy_copy__float32_float32", "CuPy", "copy/cast", "CuPy copy"),
    ("__amd_rocclr_copyBuffer", "HIP runtime (ROCclr)", "memcpy", "HIP runtime copyBuffer"),
    ("rotary_kernel", "FlashAttention (Triton)", "rope", "Rotary Embedding (Triton)"),
    ("void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 const*, int, "
     "unsigned char*, float*, int, int, int, int, bool, float, __nv_fp8_interpretation_t)",
     "custom CUDA (cuda:: namespace)", "quantization", "per_token_cast_to_fp8_with_channels"),
    ("matmul_k(float*, float*, float*, int, int, int)", "custom CUDA C++", "GEMM", "matmul_k"),
]


def _corpus_families() -> list[tuple[str, str, str, str]]:
    """tests/data/kernel_names/public_corpus.tsv: a real name per rule and category of the public trace corpus."""
    lines = [line for line in (NAMES / "public_corpus.tsv").read_text().splitlines()
             if not line.startswith("#")]
    rows = list(csv.DictReader(lines, delimiter="\t"))
    return [(row["name"], row["library"], row["category"], row["friendly"]) for row in rows]


FAMILIES += _corpus_families()
