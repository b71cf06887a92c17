// Activation kinds shared by the model config and the compute backends.
#pragma once

namespace perceiver {

enum class GeluKind { kErf, kTanh };  // HF "gelu" (exact) and "gelu_new" / jax.nn.gelu (tanh)

}  // namespace perceiver
