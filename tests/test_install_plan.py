"""tools/check_install_plan.py: the parity tier's guard against CUDA packages."""

from __future__ import annotations

from tools.check_install_plan import offenders


def test_cuda_packages_and_a_non_cpu_torch_are_refused():
    plan = [("torch", "2.15.0"), ("nvidia-cublas", "13.4"), ("triton", "3.9.0"), ("nvidia_cudnn_cu13", "9.2")]
    assert offenders(plan) == ["torch==2.15.0 (not a +cpu build)", "nvidia-cublas==13.4", "triton==3.9.0",
                               "nvidia_cudnn_cu13==9.2"]


def test_the_parity_peers_pass():
    plan = [("torch", "2.13.0+cpu"), ("torchao", "0.18.0"), ("nvidia-modelopt", "0.47.0"), ("nvidia-ml-py", "13.6"),
            ("onnxruntime", "1.32.0"), ("numba-cuda", "0.30.4")]
    assert offenders(plan) == []
