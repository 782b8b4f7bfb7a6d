"""/proc parsing shared by the executor's memory measurement and calibration's environment."""

from perfmodel.execute.host import proc_field, proc_kib, rss_bytes


def test_proc_fields_parse_key_value_lines(tmp_path):
    f = tmp_path / "status"
    f.write_text("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nmodel name\t: Some CPU @ 2.0GHz\n")
    assert proc_field(str(f), "Name") == "python"
    assert proc_field(str(f), "model name") == "Some CPU @ 2.0GHz"  # cpuinfo pads the key with a tab
    assert proc_kib(str(f), "VmRSS") == 1024 * 1024
    assert proc_kib(str(f), "VmHWM") == 2048 * 1024
    assert proc_field(str(f), "VmSwap") is None
    assert proc_field(str(tmp_path / "missing"), "VmRSS") is None


def test_this_process_resident_memory_is_below_its_high_water_mark():
    assert 0 < rss_bytes() <= rss_bytes("VmHWM")


def test_cpu_shares_by_hand():
    from perfmodel.execute.host import CPU_STAT_FIELDS, cpu_shares, cpu_stat

    before = dict.fromkeys(CPU_STAT_FIELDS, 100)
    after = {**before, "user": 160, "idle": 120, "steal": 120}  # 60 + 20 + 20 ticks
    shares = cpu_shares(before, after)
    assert shares["user"] == 0.6 and shares["idle"] == 0.2 and shares["steal"] == 0.2 and shares["nice"] == 0
    assert cpu_shares(None, after) is None and cpu_shares(before, before) is None
    now = cpu_stat()
    assert now is None or set(now) == set(CPU_STAT_FIELDS)


def test_usable_cores_is_at_most_the_affinity_mask():
    import os

    from perfmodel.execute.host import usable_cores

    n = usable_cores()
    assert 1 <= n <= (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
