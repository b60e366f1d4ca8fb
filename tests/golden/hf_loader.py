"""Test-only: makes transformers' DeepseekV41 model importable when the installed transformers
lacks it (every PyPI release up to 5.24.0 does). SRC/deepseek_v41/ must hold
configuration_deepseek_v41.py and modeling_deepseek_v41.py from huggingface/transformers
(commit 0a2080b4, read through the search tool; never committed). The folder is registered as
the package transformers.models.deepseek_v41, and one shim is applied (MODEL_V41.md §10): the
installed cache_utils passes config= to cache-layer constructors only for V4's layer types,
so DynamicCache(config=...) could not build DeepseekV41CSACache."""
import importlib
import os
import sys
import types


def load(src):
    import transformers.cache_utils as cu
    import transformers.models

    name = "transformers.models.deepseek_v41"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(src, "deepseek_v41")]
        pkg.__package__ = name
        sys.modules[name] = pkg
        transformers.models.deepseek_v41 = pkg
    cm = importlib.import_module(name + ".configuration_deepseek_v41")
    mm = importlib.import_module(name + ".modeling_deepseek_v41")
    shims = []
    orig = cu.get_layer_types_and_kwargs
    if not getattr(orig, "v41_shim", False):
        def with_config(config):
            layer_types, kwargs = orig(config)
            for t, kw in zip(layer_types, kwargs):
                if t == "shared_compressed_attention":
                    kw["config"] = config
            return layer_types, kwargs

        with_config.v41_shim = True
        cu.get_layer_types_and_kwargs = with_config
        shims.append("cache_utils.get_layer_types_and_kwargs passes config= for shared_compressed_attention")
    return cm, mm, shims
