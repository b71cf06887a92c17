#!/usr/bin/env python3
"""StableHLO text (perceiver-export's <hash>.mlir) -> serialized XLA HloModuleProto (<hash>.hlo.pb),
the input `neuronx-cc compile --framework XLA` documents. Uses jaxlib's MLIR->XLA converter, an
internal entry point: use the jaxlib version pinned in tests/xla/venv.sh (jax==0.10.2, jaxlib==0.10.2),
against which `ctest -L xla` checks this conversion. In-place updates ({tf.aliasing_output}) become
the module's input/output aliases.
Usage: stablehlo_to_hlo.py IN.mlir OUT.hlo.pb"""
import os
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1:]
    try:
        from jax._src.lib import xla_client as xc
    except ImportError as e:
        sys.exit(f"stablehlo_to_hlo: jaxlib is not importable by {sys.executable} ({e}); "
                 "HINT: pip install jax==0.10.2 jaxlib==0.10.2, or set PERCEIVER_PYTHON to a Python that has them")
    with open(src) as f:
        text = f.read()
    computation = xc._xla.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False, return_tuple=True)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(computation.as_serialized_hlo_module_proto())
    os.replace(tmp, dst)


main()
