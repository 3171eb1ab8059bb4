"""GQA varlen attention backward's asv benchmarks: the classes of its suite's grid
(``kernelgate.cases.attention.SUITE``): the three dQ/dK/dV accumulation modes against torch's varlen_attn
(FA2) and cuDNN SDPA. TileLang has no interpreter: without a GPU every benchmark here is skipped.
"""

from kernelgate.cases.attention import SUITE
from kernelgate.measure import asv_classes

# The versions asv files each benchmark's history under (kernelgate.measure.asv_classes): the hashes of their
# source before these classes were generated.
VERSIONS = {
    "AttentionBackward.time_backward": "53bea93fb59d7e948ab01e9c093f9d415cc18ac8966d93b1b4dced85864f14e0",
    "AttentionBackwardMetrics.track_pct_matmul_peak": "f046ef169018458f026a8771559f738b2427a07e69931d3da86ab9bed6163e93",  # noqa: E501
    "AttentionBackwardMetrics.track_speedup_vs_cudnn": "a36099334059567946bfa134f3ce3e4855c95b225c9e3446a440c320ad31dc06",  # noqa: E501
    "AttentionBackwardMetrics.track_speedup_vs_fa2": "4ad62605f29803153cb03a358bd430e874f16ee5ee4f6ad9c532e04866ae1723",
    "AttentionBackwardMetrics.track_tflops": "4d63f2e77f790f3cd1695dd5c479838e6d79fa7757cc3e1974838149fc921ac9",
}

AttentionBackward = asv_classes.time_class(SUITE, "AttentionBackward", VERSIONS)


class AttentionBackwardMetrics(asv_classes.Metrics, suite=SUITE, grid="AttentionBackward", versions=VERSIONS):
    def setup_cache(self):  # its own: asv shares a setup_cache's result between classes by the line it is on
        return self.measure_selected()
