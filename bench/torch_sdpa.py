"""torch_sdpa.py - PyTorch's fused attention at GPT-2 124M's shape, for comparison with
bench/attention (resgrad's kernels at the same shape).

q, k, v, g: [8, 12, 1024, 64] bf16 on the GPU, causal. For each of PyTorch's SDPA
backends (FlashAttention-2, cuDNN, memory-efficient), forced with sdpa_kernel: the
forward alone, and forward + backward(g), each timed by CUDA events around one call,
5 warm-up calls then the median of 50; bwd is their difference. PyTorch's backward is
not deterministic for every backend (its dq may be added with atomics).

usage: python3 bench/torch_sdpa.py        (on a machine with PyTorch and a CUDA device)
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, T, D = 8, 12, 1024, 64


def median_ms(fn, n=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(n)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in ev)[n // 2]


def main():
    q, k, v = [torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3)]
    g = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        fwd().backward(g)

    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
               SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel(be):
                tf, tfb = median_ms(fwd), median_ms(fwd_bwd)
            print(f"{be.name}: fwd {tf:.3f} ms  fwd+bwd {tfb:.3f} ms  bwd {tfb - tf:.3f} ms")
        except RuntimeError as e:  # a backend this build or device lacks
            print(f"{be.name}: not available ({e})")


if __name__ == "__main__":
    main()
