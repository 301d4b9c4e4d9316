"""What the PyTorch peer scripts share (imported from their own folder)."""
import platform
import time


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


def ms_by_category(run, reps, category):
    """Runs run() `reps` times under torch.profiler: ms per run for each category(event) (the
    self time of every op event, so an op's own kernels count once), "outside ops" (the wall time
    less their sum: the framework between ops) and "wall (profiled)"."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(reps):
            run()
        wall_ms = (time.perf_counter() - t0) * 1e3 / reps
    out = {}
    for event in prof.events():
        key = category(event)
        out[key] = out.get(key, 0.0) + event.self_cpu_time_total / 1e3 / reps
    out["outside ops"] = wall_ms - sum(out.values())
    out["wall (profiled)"] = wall_ms
    return {k: round(v, 3) for k, v in out.items()}
