"""LayerNorm's asv benchmarks: the classes of its suite's grids (``kernelgate.cases.layer_norm.SUITE``).

``LayerNorm.time_layer_norm`` is the device time of one call of each variant and reference, and
``LayerNormMetrics`` tracks what the gate and the history need, measured interleaved, every case in one
process; ``LayerNormWidths`` and ``LayerNormWidthsMetrics`` measure ``auto``, what a user calls, at the row
widths models use.
"""

from kernelgate.cases.layer_norm import SUITE
from kernelgate.measure import asv_classes, bandwidth

# asv's version of the host-cost benchmarks: results measured another way drop out of their history.
HOST_ESTIMATOR = "least of 50 loops of 10 calls, each after 10 untimed calls of its own, garbage collector off"
# The versions asv files each benchmark's history under (kernelgate.measure.asv_classes): the others are the
# hashes of their source before these classes were generated.
VERSIONS = {
    "LayerNorm.time_layer_norm": bandwidth.TIME_VERSION,
    "LayerNormMetrics.track_gbps": "62eb4e42ec13bb3823f5acf9a0663a6b85dc27a4d5ad882fa61056e2df0699f0",
    "LayerNormMetrics.track_host_us": HOST_ESTIMATOR,
    "LayerNormMetrics.track_host_vs_compile": HOST_ESTIMATOR,
    "LayerNormMetrics.track_host_vs_torch": HOST_ESTIMATOR,
    "LayerNormMetrics.track_pct_peak": "462c14a1f1bdf9440f616ded731d5d7bbbd1d2dab47c3ec421c1ecf3bd4e53fa",
    "LayerNormMetrics.track_pct_tensor_copy": "d241d467369ddaeaf8e7e82bc321eb90b6ad1aff3cb4b3343f51c33932b6a03f",
    "LayerNormMetrics.track_speedup_vs_compile": "94d3d47e24a333eb09b75c8faa2afa51f4be70396d224c57777186e455c2d398",
    "LayerNormMetrics.track_speedup_vs_liger": "dfb3d74990baf39f9a9d394c60b9ae5172ca95392716ea5b25064fdbf7f24890",
    "LayerNormMetrics.track_speedup_vs_torch": "395e545f21806c5c4f16bd4cfe5ffcb6d3b77bb07da00db9f727ac97b6257dce",
    "LayerNormWidths.time_layer_norm": bandwidth.TIME_VERSION,
    "LayerNormWidthsMetrics.track_gbps": "a4322c74a6ee598d32128db7eefec4f9bb8a20a158af55128909795cb6a527ef",
    "LayerNormWidthsMetrics.track_host_us": HOST_ESTIMATOR,
    "LayerNormWidthsMetrics.track_host_vs_compile": HOST_ESTIMATOR,
    "LayerNormWidthsMetrics.track_host_vs_torch": HOST_ESTIMATOR,
    "LayerNormWidthsMetrics.track_pct_peak": "4b3a11a6a15126434f623b5b9eee5d3ac3e351d90c3caca2aafd0559a6218f19",
    "LayerNormWidthsMetrics.track_pct_tensor_copy": "6df51703d4b2d81b4590600c6d139de3ecb484d82916ed5d3d4987847d95fab7",
    "LayerNormWidthsMetrics.track_speedup_vs_compile": "3d1a9c902b904218b65c51f4e6a619d33a8f3b63ef7ec84faa02247e2a07f32b",  # noqa: E501
    "LayerNormWidthsMetrics.track_speedup_vs_liger": "fc461b24bbc9de70e5e551eee2c477d3454253dc785553358631a75d4e47fa38",
    "LayerNormWidthsMetrics.track_speedup_vs_torch": "11fe41b7a886608a03e85ed0399f3b4e4ae6b624ef0e580d767915e4e75898e3",
}

LayerNorm = asv_classes.time_class(SUITE, "LayerNorm", VERSIONS)
LayerNormWidths = asv_classes.time_class(SUITE, "LayerNormWidths", VERSIONS)


class LayerNormMetrics(asv_classes.Metrics, suite=SUITE, grid="LayerNorm", versions=VERSIONS):
    def setup_cache(self):  # its own: asv shares a setup_cache's result between classes by the line it is on
        return self.measure_selected()


class LayerNormWidthsMetrics(asv_classes.Metrics, suite=SUITE, grid="LayerNormWidths", versions=VERSIONS):
    def setup_cache(self):
        return self.measure_selected()
