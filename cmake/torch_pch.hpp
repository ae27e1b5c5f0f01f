// torch_pch.hpp — the one precompiled header: the ATen and autograd headers most files need.
// c10d/Gloo/NCCL headers are deliberately absent; only runtime/ includes them.
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <nlohmann/json.hpp>
