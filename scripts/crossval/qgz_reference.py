"""ZeRO++ qgZ's reduction as DeepSpeed runs it, for backends/deepspeed_family/swizzled_quant (tests/test_qgz.cpp).

DeepSpeed's swizzle_quant / quantized_reduction / dequantize kernels (csrc/quantization/
swizzled_quantize.cu, quant_reduce.cu, dequantize.cu via pt_binding.cpp) are CUDA-only and
DeepSpeed ships no Python reference for the first two. This script runs DeepSpeed's own
orchestration — deepspeed/runtime/comm/coalesced_collectives.py all_to_all_quant_reduce and the
groups of deepspeed/utils/groups.py _get_local_all_to_all_group, from the installed 0.19.8 — on
W real Gloo ranks (DS_ACCELERATOR=cpu; LOCAL_SIZE sets get_accelerator().device_count(), the ranks
per node), with its `quantizer_module` replaced by the three kernels written here in torch from
the CUDA sources' index arithmetic. The per-group quantization is DeepSpeed's own unit-test float
reference (tests/unit/ops/quantizer/test_quantize.py run_float_quantize / run_float_dequantize,
copied verbatim into quantizer_reference.py).

stdin: {"dir": d, "rows": r, "cols": c, "nodes": n, "devices": D}; rank i's gradient is the fp16
raw file d/in<i> (r * c values). Each rank writes its output partition (fp16 raw) to d/out<i>.
"""
import json
import os
import socket
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from quantizer_reference import run_float_dequantize, run_float_quantize  # noqa: E402


def pack_int4(q):
    """csrc/includes/quantization_utils.h _chunk: PackedInt4{high: x[i+1], low: x[i]} as a
    little-endian bit field, i.e. x[i] in the high nibble of the byte."""
    v = q.to(torch.int32).reshape(-1, 2)
    return (((v[:, 0] & 0xF) << 4) | (v[:, 1] & 0xF)).to(torch.uint8).view(torch.int8)


def unpack_int4(b):
    """dequantization_utils.h chunk: local_output[2i] = PackedInt4.low (the high nibble)."""
    v = b.view(torch.int8).to(torch.int32)
    high = v >> 4
    low = (v << 28) >> 28
    return torch.stack([high, low], 1).flatten()


class KernelModule:
    """The three ops all_to_all_quant_reduce calls, 4-bit symmetric, written from the kernels."""
    Symmetric = "symmetric"

    @staticmethod
    def _quantize(x_half, groups):
        q, params = run_float_quantize(4, True, x_half, groups)
        return pack_int4(q.flatten()), params[:, :1].contiguous()

    @staticmethod
    def _dequantize_half(data, scales, groups):
        q = unpack_int4(data).to(torch.int8)
        params = torch.cat([scales.reshape(-1, 1), torch.zeros_like(scales.reshape(-1, 1))], 1)
        return run_float_dequantize(4, True, q, params, groups).flatten().to(torch.half)

    def swizzle_quant(self, tensor, groups, bits, qtype, pipeline, nodes, devices):
        assert bits == 4 and qtype == self.Symmetric and pipeline == 1
        assert tensor.dtype == torch.half  # the kernel reads __half
        data, scales = self._quantize(tensor.reshape(-1), groups)
        gpp = groups // (nodes * devices)  # groups_per_partition
        bpg = data.numel() // groups
        out_d = torch.empty_like(data).view(-1, bpg)
        out_s = torch.empty_like(scales)
        d = data.view(-1, bpg)
        # swizzled_quant_kernel: block (x, 0, z) -> output_partition = (z % devices) * nodes + z / devices
        for z in range(nodes * devices):
            out_part = (z % devices) * nodes + z // devices
            for x in range(gpp):
                out_d[out_part * gpp + x] = d[z * gpp + x]
                out_s[out_part * gpp + x] = scales[z * gpp + x]
        return out_d.reshape(-1), out_s

    def quantized_reduction(self, data, scales, in_groups, out_groups, bits, qtype, devices):
        assert bits == 4 and qtype == self.Symmetric
        per = data.numel() // devices  # elems_per_in_tensor (bytes)
        gper = in_groups // devices  # groups_per_in_tensor
        acc = torch.zeros(per * 2, dtype=torch.half)  # reduce::init<Add, __half2>
        for j in range(devices):  # dequant_reduce: each piece dequantized to __half, added in __half2
            acc = acc + self._dequantize_half(data[j * per:(j + 1) * per], scales.reshape(-1)[j * gper:(j + 1) * gper],
                                              gper)
        return self._quantize(acc, out_groups)

    def dequantize(self, data, scales, groups, bits, qtype):
        assert bits == 4 and qtype == self.Symmetric
        return self._dequantize_half(data, scales, groups)


def worker(rank, spec, port):
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank % spec["devices"]),
                       "WORLD_SIZE": str(spec["nodes"] * spec["devices"]), "LOCAL_SIZE": str(spec["devices"]),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import deepspeed
    import deepspeed.comm as dist
    from deepspeed.runtime.comm import coalesced_collectives as cc
    from deepspeed.utils import groups
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # the CPU shm op is not used here
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    cc.quantizer_module = KernelModule()  # all_to_all_quant_reduce loads it only when None
    n = spec["rows"] * spec["cols"]
    raw = open(os.path.join(spec["dir"], f"in{rank}"), "rb").read()
    grad = torch.frombuffer(bytearray(raw), dtype=torch.half)[:n].clone().view(spec["rows"], spec["cols"])
    out = cc.all_to_all_quant_reduce([grad], groups._get_local_all_to_all_group())[0]
    out.contiguous().view(torch.int16).numpy().tofile(os.path.join(spec["dir"], f"out{rank}"))
    dist.barrier()
    import torch.distributed as tdist
    tdist.destroy_process_group()
    os._exit(0)  # torch 2.11 + Gloo may abort at interpreter exit (UPSTREAM_ON_CPU.md)


def main():
    spec = json.load(sys.stdin)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.set_num_threads(1)
    mp.start_processes(worker, args=(spec, port), nprocs=spec["nodes"] * spec["devices"], start_method="fork")
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
