import json
import sys

import numpy as np


def versions():
    import gguf  # noqa: F401
    import tokenizers
    import torch
    import transformers
    from importlib.metadata import version
    return {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
            "gguf": version("gguf"), "tokenizers": tokenizers.__version__, "numpy": np.__version__}


def case_stats(l64, l32, lnp=None):
    scale = float(np.abs(l64).max())
    st = {"max_abs_logit": scale,
          "fp32_max_abs": float(np.abs(l32 - l64).max()),
          "fp32_rel": float(np.abs(l32 - l64).max() / scale)}
    if lnp is not None:
        st["numpy_gguf_max_abs"] = float(np.abs(lnp - l64).max())
    return st


def _round(o):
    if isinstance(o, float):
        return float(f"{o:.9g}")
    if isinstance(o, list):
        return [_round(x) for x in o]
    if isinstance(o, dict):
        return {k: _round(v) for k, v in o.items()}
    return o


def dump_json(path, doc):
    """Floats are written with 9 significant digits (far below any float32 engine's error)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_round(doc), f, separators=(",", ":"))
        f.write("\n")
