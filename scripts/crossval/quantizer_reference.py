"""DeepSpeed's blockwise quantizer reference, for backends/deepspeed_family/blockwise_quant (ZeRO++ qwZ/qgZ).

DeepSpeed's quantize/dequantize kernels (csrc/quantization/, loaded by QuantizerBuilder) are
CUDA-only. Its own unit test checks them against a float reference written in torch:
tests/unit/ops/quantizer/test_quantize.py (run_float_quantize / run_float_dequantize and their
helpers), copied below verbatim from deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641
because DeepSpeed's tests are not part of the installed package. The number of groups and the
fp16 conversion of the input are DeepSpeed's own code: CUDAQuantizer.quantize
(runtime/zero/partition_parameters.py, the installed 0.19.8) runs with its CUDA module replaced
by a shim that records the group count and calls the reference (DS_ACCELERATOR=cpu: the
accelerator's device is the CPU).

stdin: {"cases": [{"input": path of float32 raw values, "numel": n, "bits": 8|4, "symmetric": bool,
                   "groups": int, or null for CUDAQuantizer's adaptive choice (8 bits, symmetric)}],
        "out_dir": dir}
For case i it writes <out_dir>/i.q (int8 raw, one value per element, int4 unpacked),
<out_dir>/i.params (float32 raw [groups, 1|2]) and <out_dir>/i.deq (float32 raw), and prints
{"groups": [...]} as the last line of stdout (tests/test_zeropp.cpp compares them bitwise).
"""
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch  # noqa: E402
from deepspeed.accelerator import get_accelerator  # noqa: E402
from deepspeed.runtime.zero.partition_parameters import CUDAQuantizer  # noqa: E402

# ---- verbatim from tests/unit/ops/quantizer/test_quantize.py (DeepSpeed@edaa722) ----


def get_q_props(q_bits):
    q_range = 2**q_bits
    q_min = -(2**(q_bits - 1))
    q_max = (2**(q_bits - 1) - 1)

    q_min = torch.IntTensor([q_min]).to(device=get_accelerator().device_name())
    q_max = torch.IntTensor([q_max]).to(device=get_accelerator().device_name())
    return q_range, q_max, q_min


def get_scale_zero_point(q_bits, is_symmetric_quant, max, min, absmax, scales=None, zero_points=None):

    q_range, q_max, q_min = get_q_props(q_bits)

    if is_symmetric_quant:
        scale = torch.empty_like(absmax)
        for i, x in enumerate(absmax):
            scale[i] = torch.ones_like(x) if x == 0 else q_range / (2 * x)
        zero_point = torch.zeros(scale.shape, dtype=torch.float32, device=get_accelerator().device_name())
    else:
        scale = torch.empty_like(max)
        for i, x in enumerate(max):
            scale[i] = torch.ones_like(x) if max[i] == min[i] else q_range / (max[i] - min[i])
        zero_point = q_min - (min * scale)

    return scale, zero_point


def run_float_quantize(q_bits, is_symmetric_quant, activations_ref, num_groups):

    # Reference implementation
    # https://pytorch.org/docs/stable/quantization-support.html

    activations_ref = activations_ref.reshape(num_groups, -1).to(dtype=torch.float32)

    max_abs_activations_ref = torch.amax(torch.abs(activations_ref), dim=-1).view(num_groups, -1)
    max_activations_ref = torch.amax(activations_ref, dim=-1).view(num_groups, -1)
    min_activations_ref = torch.amin(activations_ref, dim=-1).view(num_groups, -1)

    _, q_max, q_min = get_q_props(q_bits)

    scale, zero_point = get_scale_zero_point(q_bits, is_symmetric_quant, max_activations_ref, min_activations_ref,
                                             max_abs_activations_ref)

    data_f = activations_ref * scale

    if not is_symmetric_quant:
        data_f = data_f + zero_point

    data_i32 = torch.round(data_f).to(dtype=torch.int32)

    data_i32 = torch.minimum(torch.maximum(data_i32, q_min.expand_as(data_i32)), q_max.expand_as(data_i32))
    data_i8 = data_i32.to(dtype=torch.int8)

    scales = (1.0 / scale).reshape(-1, 1)
    offsets = zero_point.reshape(-1, 1)
    params = torch.cat((scales, offsets), dim=-1)

    return data_i8, params


def run_float_dequantize(q_bits, is_symmetric_quant, data_i8, params, num_groups):
    data_f = data_i8.reshape(num_groups, -1).to(dtype=torch.float32)

    scales = params[:, 0].reshape(-1, 1)
    offsets = params[:, 1].reshape(-1, 1)

    if not is_symmetric_quant:
        data_f = data_f - offsets
    else:
        assert offsets.allclose(torch.zeros_like(offsets))

    data_f = data_f * scales

    return data_f


# ---- end of the verbatim copy ----


class _ReferenceModule:
    """Stands in for the CUDA quantizer module CUDAQuantizer calls: records the group count."""
    Symmetric = "symmetric"
    Asymmetric = "asymmetric"

    def __init__(self):
        self.groups = None

    def quantize(self, param, groups, bits, kind):
        self.groups = groups
        return run_float_quantize(bits, kind == self.Symmetric, param, groups)


def main():
    spec = json.load(sys.stdin)
    out_dir = spec["out_dir"]
    groups_used = []
    for i, case in enumerate(spec["cases"]):
        n = case["numel"]
        x = torch.frombuffer(bytearray(open(case["input"], "rb").read()), dtype=torch.float32)[:n].clone()
        bits, sym = case["bits"], case["symmetric"]
        if case.get("groups") is None:
            assert bits == 8 and sym, "CUDAQuantizer quantizes 8-bit symmetric only"
            shim = _ReferenceModule()
            quantizer = object.__new__(CUDAQuantizer)  # no __init__: it would build the CUDA op
            quantizer.quantizer_cuda_module = shim
            quantizer.group_size_cache = {}
            q, params = quantizer.quantize(x)  # DeepSpeed's group choice and fp16 conversion
            groups = shim.groups
        else:
            groups = case["groups"]
            # The kernel reads __half (pt_binding.cpp quantize_kernel): the same conversion.
            q, params = run_float_quantize(bits, sym, x.to(torch.half), groups)
        deq = run_float_dequantize(bits, sym, q, params, groups).flatten()
        if sym:
            params = params[:, :1]  # the kernel stores no offset for symmetric quantization
        q.flatten().contiguous().numpy().tofile(os.path.join(out_dir, f"{i}.q"))
        params.contiguous().to(torch.float32).numpy().tofile(os.path.join(out_dir, f"{i}.params"))
        deq.contiguous().numpy().tofile(os.path.join(out_dir, f"{i}.deq"))
        groups_used.append(int(groups))
    sys.stdout.write("\n" + json.dumps({"groups": groups_used}) + "\n")


if __name__ == "__main__":
    main()
