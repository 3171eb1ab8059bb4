"""Launch-configuration sweeps: the LayerNorm tuner (``layer_norm``, its search space ``space`` and parallel
compiles ``compile``), an A/B of two tuned tables (``compare``) and the attention tile sweep (``attention``)."""
