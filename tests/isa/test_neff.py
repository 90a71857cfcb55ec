import subprocess
import sys

import pytest

from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.isa import NeffFormatError, neff
from trnscope.sim import simulate

SCRIPT = """
from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.sim import simulate
p = matmul_program(384, 256, 640, "bfloat16", spec=hw.TRN2)
tl = simulate(p, hw.TRN2)
print(p.content_hash.hex(), repr(tl.total_ns), hash(tuple(tl.start_ns.tolist())) if False else sum(tl.start_ns.tolist()))
"""


def test_same_program_same_hash_and_timeline_in_two_processes():
    outs = [subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert outs[0] == outs[1]
    local = matmul_program(384, 256, 640, "bfloat16", spec=hw.TRN2)
    assert outs[0].split()[0] == local.content_hash.hex()


def test_neff_round_trip(tmp_path):
    p = matmul_program(256, 128, 512, "float32", spec=hw.TRN2)
    path = tmp_path / f"neff_{p.neff_id}.neff"
    neff.save(p, path)
    data = path.read_bytes()
    assert data[:4] == b"NEFF" and len(data) > 1024
    header = neff.read_header(data)
    assert header["neff_id"] == p.neff_id and header["name"] == p.name and header["target"] == "trn2"
    q = neff.load(path)
    assert q.content_hash == p.content_hash
    assert q.instructions == p.instructions
    assert simulate(q, hw.TRN2, cache=False).total_ns == simulate(p, hw.TRN2, cache=False).total_ns


def test_neff_errors(tmp_path):
    bad = tmp_path / "x.neff"
    bad.write_bytes(b"not a neff")
    with pytest.raises(NeffFormatError, match="not a NEFF file"):
        neff.load(bad)
    p = matmul_program(128, 128, 128, "float32", spec=hw.TRN2)
    data = neff.to_bytes(p)
    (tmp_path / "t.neff").write_bytes(data[:-100])
    with pytest.raises(NeffFormatError, match="truncated"):
        neff.load(tmp_path / "t.neff")
    corrupt = bytearray(data)
    corrupt[-5] ^= 0xFF
    (tmp_path / "c.neff").write_bytes(bytes(corrupt))
    with pytest.raises(NeffFormatError, match="corrupt"):
        neff.load(tmp_path / "c.neff")
    with pytest.raises(NeffFormatError, match="cannot read"):
        neff.load(tmp_path / "missing.neff")
