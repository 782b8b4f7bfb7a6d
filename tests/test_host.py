"""/proc parsing shared by the executor's memory measurement and calibration's environment."""

from perfmodel.host import proc_field, proc_kib, rss_bytes


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
