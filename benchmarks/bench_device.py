"""The device's own ceilings, measured once per run and kept in the history:
a drop here explains a drop everywhere else."""

from kernelgate.measure import timing


class Device:
    rounds = 1
    timeout = 300

    def setup(self):
        if not timing.gpu_timing():
            raise NotImplementedError("device peaks need a GPU")

    def track_copy_peak(self):
        return timing.copy_peak_gbps()

    track_copy_peak.unit = "GB/s"

    def track_bf16_matmul_peak(self):
        return timing.matmul_peak_tflops()

    track_bf16_matmul_peak.unit = "TFLOP/s"
