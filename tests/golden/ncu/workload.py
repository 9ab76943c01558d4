# Fixture workload for lpo deep (tests/golden/ncu/README.md): a few kernels of known work, each run 4
# times, inside NVTX ranges. Run by record.sh under Nsight Compute and by `lpo deep -- python3 <this>`.
#   bf16 GEMM 4096^3 (cuBLAS, tensor cores): 2 * 4096^3 FLOPs
#   fp32 GEMM 2048^3 with TF32 off (CUDA cores, FFMA): 2 * 2048^3 FLOPs
#   softmax over 8192 rows of 4096 fp32
#   elementwise x * y over 8192 x 4096 fp32 (3 x 128 MiB moved)
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
dev = "cuda"
a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
f = torch.randn(2048, 2048, device=dev, dtype=torch.float32)
g = torch.randn(2048, 2048, device=dev, dtype=torch.float32)
x = torch.randn(8192, 4096, device=dev, dtype=torch.float32)
y = torch.randn(8192, 4096, device=dev, dtype=torch.float32)
torch.cuda.synchronize()
for i in range(4):
    torch.cuda.nvtx.range_push("matmul_bf16")
    c = a @ b
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("matmul_fp32")
    h = f @ g
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("softmax")
    s = torch.softmax(x, dim=-1)
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("mul")
    z = x * y
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("checksum", float(c.float().sum()), float(h.sum()), float(s.sum()), float(z.sum()))
