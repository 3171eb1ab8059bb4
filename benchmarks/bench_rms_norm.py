"""RMSNorm's asv benchmarks: the classes of its suite's grid (``kernelgate.cases.rms_norm.SUITE``).

``RMSNorm.time_rms_norm`` is the device time of one call of the kernel and of each reference at the row widths
models use, and ``RMSNormMetrics`` tracks what the gate and the history need, measured interleaved, every case
in one process.
"""

from kernelgate.cases.rms_norm import SUITE
from kernelgate.measure import asv_classes, bandwidth

VERSIONS = {"RMSNorm.time_rms_norm": bandwidth.TIME_VERSION}  # the rest at asv_classes' first version

RMSNorm = asv_classes.time_class(SUITE, "RMSNorm", VERSIONS)


class RMSNormMetrics(asv_classes.Metrics, suite=SUITE, grid="RMSNorm", versions=VERSIONS):
    def setup_cache(self):  # its own: asv shares a setup_cache's result between classes by the line it is on
        return self.measure_selected()
