"""tracegen capture, emulation: real values of small tensors (shadows) and the stand-ins of values
derived from large ones (part 1); copies PyTorch makes below Python: list/range indices,
``t[i] = 3``, ``torch.load(map_location="cuda")``, empty tensors (part 2)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

import torch  # noqa: E402  (the test extra installs torch==2.13.0)

from fastrack_core.traceio import read_trace  # noqa: E402
from tracegen.cli import main as tracegen_main  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture(scope="session")
def emu():
    from tracegen import emulation

    emulation.preload()
    return emulation


def _capture(script, out, *script_args, opts=()):
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), *opts, str(script), *script_args],
                             catch_exceptions=False)
    return res


def _df(path):
    return read_trace(path).table.to_pandas()


# ----------------------------------------------------------------------------- part 1: values


def test_generate_loop_runs_to_its_length_and_small_values_are_real(emu, tmp_path):
    out = tmp_path / "gen.parquet"
    res = _capture(SCRIPTS / "generate_loop.py", out)
    assert res.exit_code == 0, res.output
    # 7 decode steps (the length criterion, from real shapes), never an early end-of-sequence;
    # the stand-in token of an argmax over 50 000 logits is 50 000 // 2 (reads.standin_index)
    assert "decode steps 7 " in res.output
    assert "25000, 25000, 25000, 25000, 25000, 25000, 25000]" in res.output
    # the prompt is the script's own CPU randint, copied: its real values (the script seeds 0 and
    # builds its model on the CPU first)
    torch.manual_seed(0)
    torch.nn.Embedding(50_000, 16), torch.nn.Linear(16, 50_000, bias=False)
    prompt = torch.randint(3, 100, (2, 5)).tolist()
    assert f"tokens [{prompt[0][:-1]}".rstrip("]") + f", {prompt[0][-1]}, 25000" in res.output
    # the small-tensor loop stops on the real end-of-sequence value after 4 steps
    assert "counter steps 4 last token 7" in res.output
    assert "position_ids [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" in res.output
    df = _df(out)
    d2h = df[df.copy_dir == "D2H"]
    # one bool read per decode step (`while not this_peer_finished`), pinned, each waited for
    assert (d2h.bytes == 1).sum() == 7 and set(d2h[d2h.bytes == 1].host_mem) == {"pinned"}
    # tok.item(): 4 in the loop + 1 printed; input_ids.tolist(): 2 x 12 int64; position_ids[0]
    assert (d2h.bytes == 8).sum() == 5
    assert sorted(d2h[d2h.bytes > 8].bytes) == [88, 192]
    syncs = df[df.kind == "sync"]
    for i in d2h.index:
        assert any(i in list(syncs.deps[j]) for j in syncs.index)
    assert (df[df.kind == "kernel"].name.str.startswith("aten::argmax")).sum() == 7
    assert (df[df.kind == "kernel"].name.str.startswith("aten::isin")).sum() == 7


SHADOW_PROBE = """
import torch
torch.manual_seed(0)
t = torch.zeros(5, device="cuda", dtype=torch.long)
t[2] = 3
assert t.tolist() == [0, 0, 3, 0, 0] and int(t.sum()) == 3 and t.argmax().item() == 2
x = torch.arange(10, device="cuda")
assert x[x % 2 == 0].tolist() == [0, 2, 4, 6, 8]          # a small mask: real selection
assert torch.nonzero(x > 6).shape == (3, 1)                # real size, not every element
assert bool((x < 10).all()) and not bool((x > 9).any())
loss = torch.tensor(5.0, device="cuda")
n = 0
while loss > 1.0:                                          # small float: real, 3 halvings
    loss = loss * 0.5
    n += 1
assert n == 3 and loss.item() == 0.625
big = torch.randn(1000, 1000, device="cuda")               # large: no values
assert big.argmax().item() == 500_000                      # the index stand-in: numel // 2
assert big.max(dim=1).indices[:2].tolist() == [500, 500]   # ... size of the dim // 2
assert big.topk(3, dim=1).indices[0].tolist() == [500, 501, 502]
assert float(big.sum()) == 1.0 and bool(torch.all(big > 0)) and not bool(torch.any(big > 0))
logits = big[:2].clone()                                   # a copy of stand-ins stays stand-in
assert logits.argmax(-1).tolist() == [500, 500] and logits.softmax(-1).sum().item() == 1.0
s = torch.randn(3, device="cuda")                          # random on the GPU: not the CPU RNG
after = torch.rand(3)
torch.manual_seed(0)
assert torch.equal(after, torch.rand(3))                   # the script's CPU generator is intact
print("ok")
"""


def test_small_values_are_real_and_large_ones_stand_in(emu, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SHADOW_PROBE)
    res = _capture(script, tmp_path / "probe.parquet")
    assert res.exit_code == 0, res.output
    assert "ok" in res.output


GPU_ONLY = """
import torch, torch.nn as nn, torch.nn.functional as F
model = nn.Sequential(nn.Embedding(100, 32), nn.Flatten(), nn.Linear(32 * 8, 4)).to("cuda")
opt = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 100, (16, 8)).to("cuda")
for _ in range(2):
    loss = F.cross_entropy(model(ids), (ids[:, 0] % 4))
    loss.backward()
    opt.step()
    opt.zero_grad()
    pos = torch.arange(8, device="cuda")[None].expand(16, 8) * (ids > 0)
    print(loss.item(), int(pos.sum()))
"""


def test_shadows_change_no_gpu_op(emu, tmp_path, monkeypatch):
    """The same script with shadows and with none (limits 0): every recorded op is identical
    (shadow work costs nothing on the virtual timeline and launches nothing)."""
    from tracegen.emulation import shadows

    script = tmp_path / "gpu_only.py"
    script.write_text(GPU_ONLY)
    modelled = ("--host-time", "modelled")  # identical timestamps: the deterministic host time
    res = _capture(script, tmp_path / "with.parquet", opts=modelled)
    assert res.exit_code == 0, res.output
    monkeypatch.setattr(shadows, "SHADOW_MAX_ELEMENTS", 0)
    monkeypatch.setattr(shadows, "SHADOW_MAX_FLOAT_ELEMENTS", 0)
    res2 = _capture(script, tmp_path / "without.parquet", opts=modelled)
    assert res2.exit_code == 0, res2.output
    assert res.output.splitlines()[0] != res2.output.splitlines()[0]  # the values differ...
    a, b = _df(tmp_path / "with.parquet"), _df(tmp_path / "without.parquet")
    cols = ["kind", "name", "start_ns", "dur_ns", "bytes", "copy_dir", "host_mem", "stream", "step"]
    assert len(a) == len(b) > 50
    assert a[cols].astype(str).equals(b[cols].astype(str))  # ... the trace does not


def test_shadow_limits_bound_memory(emu):
    from tracegen.emulation.shadows import SHADOW_MAX_ELEMENTS, SHADOW_MAX_FLOAT_ELEMENTS, Shadows

    sh = Shadows()
    meta = torch.device("meta")
    assert sh.storage(torch.empty(SHADOW_MAX_ELEMENTS, dtype=torch.long, device=meta), create=True) is not None
    assert sh.storage(torch.empty(SHADOW_MAX_ELEMENTS + 1, dtype=torch.long, device=meta), create=True) is None
    assert sh.storage(torch.empty(SHADOW_MAX_ELEMENTS, dtype=torch.bool, device=meta), create=True) is not None
    f = torch.empty(SHADOW_MAX_FLOAT_ELEMENTS, dtype=torch.float32, device=meta)
    assert sh.storage(f, create=True).nbytes() == SHADOW_MAX_FLOAT_ELEMENTS * 4
    assert sh.storage(torch.empty(SHADOW_MAX_FLOAT_ELEMENTS + 1, device=meta), create=True) is None
    f.resize_(SHADOW_MAX_FLOAT_ELEMENTS * 2)  # grown past the limit: the shadow is dropped
    assert sh.storage(f) is None


def test_index_stand_in_rule(emu):
    from tracegen.emulation.reads import standin_index

    assert standin_index(50_257) == 25_128 and standin_index(1) == 0 and standin_index(0) == 0
    assert sorted(standin_index(7, j) for j in range(7)) == list(range(7))  # sort: a permutation


def test_transformers_generate_terminates(emu, tmp_path):
    """Optional: Hugging Face generate() on a randomly initialised tiny GPT-2 (no download)."""
    pytest.importorskip("transformers")
    script = tmp_path / "hf.py"
    script.write_text(
        "import torch\n"
        "from transformers import GPT2Config, GPT2LMHeadModel\n"
        "cfg = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50_000, n_positions=64,\n"
        "                 bos_token_id=1, eos_token_id=2, pad_token_id=0)\n"
        "model = GPT2LMHeadModel(cfg).to('cuda').eval()\n"
        "ids = torch.tensor([[5, 6, 7, 8]], device='cuda')\n"
        "out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)\n"
        "print('generated', out.shape[1] - ids.shape[1])\n")
    res = _capture(script, tmp_path / "hf.parquet")
    assert res.exit_code == 0, res.output
    assert "generated 6" in res.output


# ----------------------------------------------------------------------------- part 2: copies


def _steps(df):
    return {s: g for s, g in df.groupby("step") if s >= 0}


def test_copies_below_python(emu, tmp_path):
    ck = tmp_path / "ck.pt"
    w = torch.arange(16.0).view(4, 4)
    torch.save({"w": w, "tied": w, "row": w[1], "ids": torch.tensor([1, 2, 3]), "empty": torch.empty(0),
                "big": torch.zeros(1000, 100), "step": 3}, ck)
    out = tmp_path / "copies.parquet"
    res = _capture(SCRIPTS / "host_copies.py", out, str(ck))
    assert res.exit_code == 0, res.output
    df = _df(out)
    steps = _steps(df)

    def summary(g):
        cp = g[g.kind == "memcpy"]
        return ([(d, int(b), m) for d, b, m in zip(cp.copy_dir, cp.bytes, cp.host_mem)],
                list(g[g.kind == "kernel"].name.str.split(" ").str[0]),
                list(g[g.kind == "sync"].name))

    blocking = ["cudaStreamSynchronize"]
    assert summary(steps[0]) == ([("H2D", 8, "pageable")], ["aten::index"], blocking)
    assert summary(steps[1]) == ([("H2D", 32, "pageable")], ["aten::index"], blocking)
    assert summary(steps[2]) == ([("H2D", 8, "pageable")], [], blocking)        # no kernel, no D2D
    assert summary(steps[3]) == ([], ["aten::fill_"], [])
    assert summary(steps[4]) == ([("H2D", 4, "pageable")], ["aten::index_put_"], blocking)
    assert summary(steps[5]) == ([], ["aten::gt", "aten::index_put_"], [])
    # torch.load, five spellings of map_location: one blocking pageable H2D per storage (the tied
    # weight and the row share one storage of 64 bytes; the empty storage copies nothing)
    for s in range(6, 11):
        copies, kernels, syncs = summary(steps[s])
        assert copies == [("H2D", 64, "pageable"), ("H2D", 24, "pageable"), ("H2D", 400_000, "pageable")]
        assert kernels == [] and syncs == blocking * 3
    assert summary(steps.get(11, df.iloc[0:0])) == ([], [], [])                   # empty tensors
    assert (df.bytes[df.kind == "memcpy"] > 0).all()


def test_bad_map_location_device(emu, tmp_path):
    ck = tmp_path / "ck.pt"
    torch.save({"w": torch.ones(2)}, ck)
    script = tmp_path / "load1.py"
    script.write_text(f"import torch\ntorch.load({str(ck)!r}, map_location='cuda:1')\n")
    out = tmp_path / "load1.parquet"
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(script)])
    assert res.exit_code == 2
    assert "CUDA device 1" in res.output and "device_count() is 1" in res.output
    assert not out.exists()


def test_item_of_many_elements_is_refused(emu, tmp_path):
    script = tmp_path / "item.py"
    script.write_text("import torch\ntorch.ones(3, device='cuda').item()\n")
    out = tmp_path / "item.parquet"
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(script)])
    assert res.exit_code == 2 and "cannot be converted to Scalar" in res.output
    assert not out.exists()
