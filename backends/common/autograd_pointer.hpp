// autograd_pointer.hpp — how an engine (or its parameter groups) travels through a custom autograd
// Function's context: AutogradContext::saved_data holds IValues, so the pointer is stored as an
// int64_t and read back. Owns: that idiom, once (common::gather_edge in autograd_bridge.cpp and
// FSDP2's RegisterPostBackward in fsdp2_state.cpp use it). Must not: own or outlive the object
// (the engine outlives every graph it builds: it drains its streams before it is destroyed).
#pragma once
#include <string>

namespace torch::autograd {
struct AutogradContext;
}  // namespace torch::autograd

namespace zb::backends::common {

void save_pointer(torch::autograd::AutogradContext* ctx, const std::string& key, const void* p);
void* load_pointer(torch::autograd::AutogradContext* ctx, const std::string& key);

}  // namespace zb::backends::common
