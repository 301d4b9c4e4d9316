"""What the PyTorch peer scripts share (imported from their own folder)."""
import platform


def cpu_model():
    """The CPU's model name as /proc/cpuinfo gives it (platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
