"""The host record every benchmark result line carries (``benchmarks/common.py``)."""

import importlib.util
from pathlib import Path

import pytest

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "common.py"
_spec = importlib.util.spec_from_file_location("benchmarks_common", _path)
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)

# Two processors of an AVX-512 host, trimmed: the first processor's fields decide.
X86 = """processor\t: 0
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse4_2 avx f16c avx2 fma bmi2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse4_2 avx f16c avx2 fma bmi2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes crc32 sve sve2
"""


@pytest.mark.parametrize("cpuinfo, expected", [
    (X86, "AMD EPYC 9R14 (avx, avx2, fma, avx512f, avx512bw, avx512vl, avx512_vnni, avx512_bf16)"),
    (X86.replace(" avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni", ""), "AMD EPYC 9R14 (avx, avx2, fma)"),
    (ARM, None),  # no model name line: the model comes from the platform module; the extensions are still listed
])
def test_cpu_description_names_model_and_vector_extensions(cpuinfo, expected):
    described = common.cpu_description(cpuinfo)
    if expected is not None:
        assert described == expected
    else:
        assert described.endswith("(asimd, sve, sve2)"), described


def test_every_host_record_carries_the_cpu():
    host = common.host_fields()
    assert host["cpu"] == common.cpu_description()
    assert host["cpu"] in common.host_line()


def test_rows_say_which_row_has_started_and_how_many_there_are(capsys, monkeypatch):
    monkeypatch.setattr(common.sys, "argv", ["benchmarks/learning.py"])
    rows = common.Rows(2)
    rows.start("CartPole-v1, rlpar ppo")
    rows.start("CartPole-v1, rejax")
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 2  # stdout keeps the JSON results
    assert lines[0].startswith("[learning] row 1/2: CartPole-v1, rlpar ppo (") and lines[0].endswith("s so far)")
    assert lines[1].startswith("[learning] row 2/2: CartPole-v1, rejax (")


def test_peers_keep_the_callers_xla_flags_but_not_the_fake_device_count():
    spec = importlib.util.spec_from_file_location("benchmarks_peers", _path.parent / "peers.py")
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)

    flags = "--xla_cpu_max_isa=AVX2 --xla_force_host_platform_device_count=4 --xla_cpu_enable_fast_math=false"
    assert peers.peer_xla_flags(flags) == "--xla_cpu_max_isa=AVX2 --xla_cpu_enable_fast_math=false"
    assert peers.peer_xla_flags("") == ""
