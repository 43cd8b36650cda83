"""Every static registration of the glue is live (the linker could drop it silently).

One test per registration macro: REGISTER_ALLOCATOR, C10_REGISTER_GUARD_IMPL,
RegisterPrivateUse1HooksInterface, the generator behind the hooks,
TORCH_LIBRARY_IMPL(aten, PrivateUse1), TORCH_LIBRARY_IMPL(_, PrivateUse1) and
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1).
"""

import gc

import pytest
import torch

NATIVE_OPS = [
    "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view",
    "aten::_reshape_alias", "aten::resize_", "aten::_copy_from", "aten::_copy_from_and_resize",
    "aten::_local_scalar_dense", "aten::set_.source_Storage", "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Tensor", "aten::set_", "aten::fill_.Scalar", "aten::fill_.Tensor", "aten::zero_",
    "aten::record_stream", "aten::convolution_overrideable", "aten::convolution_backward_overrideable",
    # aten/index/scatter.cpp, aten/reduce/{unique,search,histogram}.cpp: operators and the
    # structured wrappers around stub-backed PyTorch code
    "aten::scatter_reduce.two", "aten::scatter.reduce", "aten::scatter.value_reduce", "aten::masked_scatter_",
    "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::searchsorted.Tensor",
    "aten::bucketize.Tensor", "aten::bincount", "aten::histc",
    # aten/elementwise/activation.cpp, aten/nn/{softmax,nll,norm,rnn}.cpp, aten/optim/fused.cpp
    "aten::gelu", "aten::threshold_backward", "aten::silu_backward", "aten::log_sigmoid_forward",
    "aten::binary_cross_entropy", "aten::_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
    "aten::nll_loss2d_forward", "aten::embedding_dense_backward", "aten::native_batch_norm",
    "aten::native_layer_norm_backward", "aten::native_group_norm", "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_lstm_cell_backward_impl", "aten::_thnn_fused_gru_cell",
    "aten::_thnn_fused_gru_cell_backward", "aten::_fused_adamw_", "aten::_fused_sgd_",
    # aten/nn/{fold,embedding,grid_sample,resample}.cpp (resample: linear/trilinear/bicubic upsampling)
    "aten::im2col", "aten::col2im", "aten::_embedding_bag", "aten::_embedding_bag_forward_only",
    "aten::_embedding_bag_backward", "aten::_embedding_bag_dense_backward",
    "aten::_embedding_bag_per_sample_weights_backward", "aten::grid_sampler_2d", "aten::grid_sampler_2d_backward",
    "aten::upsample_linear1d", "aten::upsample_linear1d_backward", "aten::upsample_trilinear3d",
    "aten::upsample_trilinear3d_backward", "aten::upsample_bicubic2d", "aten::upsample_bicubic2d_backward",
    # aten/nn/rnn_layer.cpp (also registered at AutogradPrivateUse1, tested below)
    "aten::lstm.input", "aten::gru.input",
    # aten/nn/attention.cpp (its _fused_sdp_choice_stub entry is proven live by test_sdpa.py's fused-path tests)
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_fused_attention_overrideable_backward",
    # aten/optim/foreach.cpp: the multi-tensor arithmetic torch.optim's foreach implementations call
    "aten::_foreach_add_.Scalar", "aten::_foreach_add.Scalar", "aten::_foreach_add_.ScalarList",
    "aten::_foreach_add_.List", "aten::_foreach_add.List", "aten::_foreach_mul_.Scalar",
    "aten::_foreach_mul_.ScalarList", "aten::_foreach_mul.ScalarList", "aten::_foreach_mul_.List",
    "aten::_foreach_mul_.Tensor", "aten::_foreach_div_.Scalar", "aten::_foreach_div_.ScalarList",
    "aten::_foreach_div_.List", "aten::_foreach_lerp_.Scalar", "aten::_foreach_addcmul_.Scalar",
    "aten::_foreach_addcmul.Scalar", "aten::_foreach_addcdiv_.Scalar", "aten::_foreach_addcdiv_.ScalarList",
    "aten::_foreach_sqrt", "aten::_foreach_sqrt_", "aten::_foreach_neg", "aten::_foreach_abs",
    "aten::_foreach_reciprocal_",
    # aten/elementwise/pointwise.cpp: complex-related native functions
    "aten::angle", "aten::angle.out", "aten::conj_physical.out",
]


@pytest.mark.parametrize("op", NATIVE_OPS)
def test_kernel_registered_for_privateuse1(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


# Kernels at the autograd key: composite operators that PyTorch would otherwise decompose
# for every backend before PrivateUse1 is reached.
AUTOGRAD_OPS = ["aten::lstm.input", "aten::gru.input"]


@pytest.mark.parametrize("op", AUTOGRAD_OPS)
def test_kernel_registered_for_autograd_privateuse1(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutogradPrivateUse1")


def test_device_allocator_registered():
    # torch.accelerator casts the registered allocator to c10::DeviceAllocator and would
    # hit an internal assert for a plain Allocator, or CPU's when nothing is registered.
    gc.collect()  # garbage of earlier tests must not be freed between the two readings
    before = torch.accelerator.memory_allocated()
    x = torch.empty(1024, dtype=torch.uint8, device="oxide")
    assert torch.accelerator.memory_allocated() == before + 1024
    assert torch._C._accelerator_isAllocatorInitialized()
    del x


def test_guard_impl_registered():
    assert torch._C._accelerator_hooks_device_count() == 2
    s = torch.Stream(device="oxide:1")  # getNewStream of the guard
    assert s.device.index == 1
    with torch.accelerator.device_index(1):
        assert torch.accelerator.current_device_index() == 1


def test_hooks_registered():
    assert torch._C._get_privateuse1_backend_name() == "oxide"
    assert torch.accelerator.is_available()  # isAvailable
    x = torch.ones(2, device="oxide")
    x.requires_grad_()
    (x * 3).sum().backward()  # backward asks hasPrimaryContext
    assert x.grad is not None
    p = torch.ones(3).pin_memory()  # getPinnedMemoryAllocator / isPinnedPtr
    assert p.is_pinned() and not torch.ones(3).is_pinned()


def test_generator_via_hooks():
    g = torch.Generator(device="oxide")  # getNewGenerator
    g.manual_seed(5)
    assert g.initial_seed() == 5
    assert g.device.type == "oxide"
    d = torch._C._accelerator_getDefaultGenerator(0)  # getDefaultGenerator
    assert d.device == torch.device("oxide:0")
    clone = g.clone_state() if hasattr(g, "clone_state") else g.graphsafe_get_state()
    assert clone.initial_seed() == 5


def test_cpu_fallback_registered_and_counted():
    torch.oxide.reset_fallback_stats()
    x = torch.tensor([0.0, 2.0]).to("oxide")
    y = torch.special.bessel_j0(x)  # no native kernel: runs on the counted fallback
    assert y.device.type == "oxide"
    torch.testing.assert_close(y.cpu(), torch.special.bessel_j0(x.cpu()))
    assert torch.oxide.fallback_stats() == {"aten::special_bessel_j0.out": 1}


def test_autocast_fallthrough_registered():
    x = torch.ones(4, device="oxide")
    with torch.autocast("oxide", dtype=torch.bfloat16):
        assert torch.oxide.is_autocast_enabled()
        assert torch.oxide.get_autocast_dtype() == torch.bfloat16
        y = x + 1  # no policy for add: falls through to the kernel
    assert y.dtype == torch.float32 and y.sum().item() == 8
    with torch.autocast("oxide", enabled=False):
        assert not torch.oxide.is_autocast_enabled()


def test_hooks_device_calls():
    assert torch._C._accelerator_hooks_device_count() == 2
    old = torch._C._accelerator_hooks_exchange_device(1)
    try:
        assert old == 0 and torch._C._accelerator_hooks_get_current_device() == 1
    finally:
        torch._C._accelerator_hooks_set_current_device(0)
    assert torch._C._accelerator_hooks_maybe_exchange_device(0) == 0


def test_generated_backend_methods():
    x = torch.ones(3)
    assert x.oxide().is_oxide and x.oxide(1).device.index == 1
    m = torch.nn.Linear(2, 2).oxide()
    assert next(m.parameters()).is_oxide
    s = torch.ones(4).untyped_storage().oxide()
    assert s.is_oxide and s.device.type == "oxide"
    seq = torch.nn.utils.rnn.pack_sequence([torch.ones(3, 2), torch.ones(2, 2)])
    packed = seq.oxide()
    assert packed.is_oxide and packed.data.device.type == "oxide"
