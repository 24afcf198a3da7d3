"""scripts/publish_results.py, which writes results/README.md's tables and plots
from the raw files in results/current/: the committed page is what those files
give, the headline means are computed as the page states them, a peer off the
fp64 reference or unable to take a workload does not count, and the plots are
small PNG files. scripts/publish.sh, the GPU side, refuses what it does not know."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import publish_results as pr  # noqa: E402

CURRENT = ROOT / "results" / "current"


def test_the_committed_page_is_what_the_raw_files_give():
    assert pr.main([str(CURRENT), "--page", str(ROOT / "results" / "README.md"), "--check"]) == 0


def test_a_page_edited_by_hand_fails_the_check(tmp_path):
    page = (ROOT / "results" / "README.md").read_text().replace("**1.468×**", "**1.500×**")
    (tmp_path / "README.md").write_text(page)
    assert pr.main([str(CURRENT), "--page", str(tmp_path / "README.md"), "--check"]) == 1
    assert pr.main([str(CURRENT), "--page", str(tmp_path / "README.md")]) == 0  # rewritten from the files
    assert "**1.468×**" in (tmp_path / "README.md").read_text()


def test_headline_numbers_of_the_published_files():
    data = pr.load(str(CURRENT))
    stats = pr.peer_stats(data["peers"])
    assert len(stats["rows"]) == 21
    assert round(stats["fi"], 3) == 1.468 and round(stats["any"], 2) == 1.37 and round(stats["ceiling"], 2) == 1.81
    assert [r["workload"] for r in data["peers"]][:4] == ["seq:128", "seq:512", "seq:2048", "batch:4"]
    assert data["peers"][-1]["workload"] == "sysprompt:512@1"  # two calls' files merged in the page's order
    bench = {r["workload"]: r for r in data["bench"]}
    assert len(bench) == 37 and round(bench["batch:64"]["codec_over_floor"], 2) == 1.34
    assert "2.05×" in pr.floor_summary(data["bench"])[0]
    assert data["planner"][("measured", 64)] == [97.2, 98.7]
    runs = {pr.e2e_name(r): r for r in data["e2e"]}
    rows = {b: attn for b, _, attn in pr.e2e_rows(runs["loogle:8"])}
    assert rows["noop"] is None and round(rows["codec"], 2) == 7.45 and round(rows["fi_decode"], 2) == 28.66
    rows = {b: attn for b, _, attn in pr.e2e_rows(runs["samples:64 (gpt-oss-20b, eager, H100)"])}
    assert round(rows["codec"], 2) == 1.29 and round(rows["fi_sink"], 2) == 40.85
    assert {k: len(v) for k, v in data["sweeps"].items()} == \
        {"q2": 21, "q4": 7, "q8": 21, "tree": 2, "fp8": 6, "capped": 21, "window": 21}
    targets = "\n".join(pr.sweep_targets(data["sweeps"]))
    assert "51 points, worst flat:64 q8 (8 query tokens) 0.99×; 0 behind" in targets and "| 1.24× |" in targets


def test_an_e2e_run_of_another_model_names_it():
    qwen = {"workload": "samples:64", "rows": {}}
    assert pr.e2e_name(qwen) == "samples:64" and pr.e2e_name({**qwen, "model": "qwen3-4b"}) == "samples:64"
    assert pr.e2e_name({**qwen, "model": "gpt-oss-20b"}) == "samples:64 (gpt-oss-20b)"
    assert pr.e2e_name({**qwen, "device": "NVIDIA H200"}) == "samples:64"  # the page's GPU
    assert pr.e2e_name({**qwen, "model": "gpt-oss-20b", "device": "NVIDIA H100 80GB HBM3", "cuda_graph": False}) == \
        "samples:64 (gpt-oss-20b, eager, H100)"
    assert pr.e2e_name({**qwen, "cuda_graph": False, "scheduler": "fifo"}) == "samples:64 (eager, FIFO)"


def row(workload, codec, floor=0.001, **peers):
    r = {"workload": workload, "codec_ms": codec, "floor_ms": floor, "flat_ms": 2 * codec}
    for key, (variant, ms, err) in peers.items():
        r.update({f"{key}_{variant}_ms": ms, f"{key}_{variant}_err": err})
        if err <= 1e-2:
            r.update({f"{key}_ms": ms, f"{key}_variant": variant})
    return r


def test_a_peer_off_the_reference_does_not_count_and_unfit_families_say_so():
    rows = [row("depth:2", 0.010, fi_decode=("tc", 0.020, 0.003), fi_cascade=("fa2", 0.040, 0.003),
                pat=("tree", 0.005, 0.2), sdpa=("cudnn", 0.008, 0.003)),
            row("sysprompt:512@1", 0.050, fi_decode=("tc", 0.100, 0.003), fi_cascade=("fa2", 0.080, 0.003))]
    rows[1].update({"pat_note": "ValueError: page size", "dense_note": "requests of different lengths"})
    table = pr.peers_table(rows)
    assert table[2] == ("| depth:2 | 10.0 | 20.0 tc | 40.0 fa2 | 8.0 cudnn | off (0.20) | 2.00× | 0.80× (cuDNN SDPA) |")
    assert table[3] == "| sysprompt:512@1 | 50.0 | 100.0 tc | 80.0 fa2 | n/a | n/a | 1.60× | 1.60× (FlashInfer cascade) |"
    stats = pr.peer_stats(rows)
    assert stats["fi"] == pytest.approx((2.0 * 1.6) ** 0.5)
    assert "pat" not in stats["per_family"]  # off everywhere it ran
    assert stats["least_ms"] == 0.008


def test_workloads_sort_by_family_then_point_then_page_size():
    names = ["sysprompt:512@1", "shape:DT", "seq:2048", "shape:2", "sysprompt:512", "batch:64", "seq:128", "long"]
    assert sorted(names, key=pr.workload_key) == ["seq:128", "seq:2048", "batch:64", "shape:2", "shape:DT", "long",
                                                  "sysprompt:512", "sysprompt:512@1"]


def test_planner_console_output_gives_each_runs_median():
    text = ("BM_DeriveAndPlan/roofline/64_mean     120 us   120 us   7\n"
            "BM_DeriveAndPlan/roofline/64_median   119 us   119 us   7\n"
            "BM_DeriveAndPlan/measured/1024_median 488 us   488 us   7\n"
            "BM_DeriveAndPlan/measured/1024_median 494 us   494 us   7\n")
    assert pr.parse_planner(text) == {("roofline", 64): [119.0], ("measured", 1024): [488.0, 494.0]}


def test_a_folder_with_some_files_renders_their_blocks_only(tmp_path):
    (tmp_path / "python_api.json").write_text((CURRENT / "python_api.json").read_text())
    blocks = pr.blocks(pr.load(str(tmp_path)))
    assert list(blocks) == ["python-api"]
    assert blocks["python-api"][2] == "| 64 | 170.0 / 21.1 / 22.5 | 276.5 / 20.5 / 24.0 | 112.9 / 31.5 / 42.8 |"


def test_plots_are_small_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    assert pr.main([str(CURRENT), "--plots", str(tmp_path)]) == 0
    for name in ("peers.png", "e2e_tpot.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 200_000, name


def test_raw_files_are_small_and_json_parses():
    for path in CURRENT.iterdir():
        assert path.stat().st_size < 100_000, path
        if path.suffix == ".json":
            json.loads(path.read_text())


def test_publish_sh_refuses_an_unknown_step_before_making_anything(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "publish.sh"), "everything", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "kernels" in result.stdout and not out.exists()


def bench_row(workload, codec, floor, kv_mb, **extra):
    return {"workload": workload, "codec_ms": codec, "floor_ms": floor, "codec_over_floor": codec / floor,
            "unique_kv_mb": kv_mb, **extra}


def test_breadth_targets_say_met_or_missed_from_the_breadth_files(tmp_path):
    # kv_mb 420 MB at 4.2 TB/s is a 0.1 ms byte floor: floor_ms 0.1 memory-bound, 0.2 compute-bound
    files = {"q4": [bench_row("loogle:8", 0.125, 0.1, 420), bench_row("batch:64", 0.3, 0.2, 420)],
             "verify": [bench_row("verify:8", 0.05, 0.04, 168)],
             "verify_q4": [bench_row("verify:8", 0.061, 0.05, 168)],
             "plain": [bench_row("long", 0.07, 0.05, 210), bench_row("flat:64", 0.25, 0.25, 1074)],
             "capped": [bench_row("long", 0.105, 0.05, 210), bench_row("flat:64", 0.25, 0.25, 1074)],
             "window": [bench_row("window:4096", 0.0293, 0.02, 33), bench_row("window:131072", 0.0298, 0.02, 33)],
             "bf16": [bench_row("flat:64", 0.25, 0.25, 1074), bench_row("long", 0.07, 0.05, 210)],
             "fp8": [bench_row("flat:64", 0.14, 0.125, 537), bench_row("long", 0.09, 0.05, 105)]}
    for kind, rows in files.items():
        (tmp_path / f"breadth_{kind}.json").write_text(json.dumps(rows))
    block = pr.blocks(pr.load(str(tmp_path)))["breadth"]
    targets = {line.split(" | ")[0][2:]: line for line in block if line.startswith("| 5")}
    assert targets["51: memory-bound and balanced points ≤ 1.3× the floor"].endswith("1.25× | met |")
    assert "1 point, slowest batch:64 (4 query tokens) 527" in targets["51: compute-bound points ≥ 550 TFLOP/s"]
    assert targets["51: compute-bound points ≥ 550 TFLOP/s"].endswith("**missed** |")
    assert "1.22×" in targets["51: verify:8, 4 draft tokens ≤ 1.2× one token"]
    assert targets["53: soft-cap and sinks ≤ 1.05× plain"] == (
        "| 53: soft-cap and sinks ≤ 1.05× plain | long 1.50×, flat:64 1.00× | **missed** |")
    assert targets["53: window:131072 ≤ 1.1× the document cut to its window (window:4096)"].endswith("1.02× | met |")
    assert "flat:64 0.56×" in targets["52: fp8 ≤ 0.6× bf16 where it stays memory-bound"]
    assert targets["52: fp8 ≤ 1.3× its floor where it turns compute-bound"].endswith("long 1.80× | **missed** |")
    table = block[block.index("") + 1:]
    assert table[2] == "| 4 query tokens | batch:64 | 0.3000 | 0.2000 | 1.50 | 527 |"
    assert table[3] == "| 4 query tokens | loogle:8 | 0.1250 | 0.1000 | 1.25 | – |"


def test_the_peer_sweep_against_flashinfer_says_met_or_missed(tmp_path):
    q4 = [row("loogle:8", 0.100, fi_prefill=("fa3", 0.200, 0.003), fi_cascade=("fa2", 0.180, 0.003)),
          row("flat:64", 0.100, fi_decode=("tc", 0.098, 0.003), fi_prefill=("fa3", 0.120, 0.003))]
    q4[1]["fi_cascade_note"] = "requests at different depths; not run"
    fp8_half1 = [row("batch:64", 0.300, fi_decode=("tc", 0.600, 0.003)), row("long", 0.070, fi_decode=("tc", 0.060, 0.003))]
    fp8_half2 = [row("long", 0.050, fi_decode=("tc", 0.060, 0.003))]  # measured again: the later file's row stands
    for name, rows in {"q4_1": q4, "fp8_1": fp8_half1, "fp8_2": fp8_half2}.items():
        (tmp_path / f"sweep_peers_{name}.json").write_text(json.dumps(rows))
    (tmp_path / "peers_1.json").write_text(json.dumps([row("seq:128", 0.01, fi_decode=("tc", 0.02, 0.003))]))
    data = pr.load(str(tmp_path))
    assert [r["workload"] for r in data["peers"]] == ["seq:128"]  # the sweep's files stay out of the peer set
    block = pr.blocks(data)["peers-sweep"]
    targets = {line.split(" | ")[0][2:]: line for line in block if line.startswith("| 5")}
    assert targets["51: ≥ 1.5× ahead of it in geometric mean"] == (
        f"| 51: ≥ 1.5× ahead of it in geometric mean | {(1.8 * 0.98) ** 0.5:.2f}× | **missed** |")
    never = next(v for k, v in targets.items() if k.startswith("51: never behind"))
    assert "2 points, worst flat:64 (4 query tokens) 0.98×; 0 behind | met |" in never  # 2% behind where nothing is shared
    fp8 = next(v for k, v in targets.items() if k.startswith("52: "))
    assert "2 points, worst long (fp8 e4m3 cache) 1.20×; 0 behind | met |" in fp8
    table = block[block.index("") + 1:]
    assert table[0].startswith("| run | workload | CoDec µs | FlashInfer decode | FlashInfer prefill |")
    assert table[2] == "| 4 query tokens | loogle:8 | 100.0 | – | 200.0 fa3 | – | 180.0 fa2 | 1.80× |"
    assert table[3] == "| 4 query tokens | flat:64 | 100.0 | 98.0 tc | 120.0 fa3 | – | n/a | 0.98× |"
    assert table[-1] == "| fp8 e4m3 cache | long | 50.0 | 60.0 tc | – | – | – | 1.20× |"


def test_publish_sh_refuses_an_unknown_sweep_kind_before_making_anything(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "publish.sh"), "peers_sweep", str(out)],
                            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "CODEC_PEER_KIND": "q5"})
    assert result.returncode == 2 and "q2 q4 q8 tree fp8 capped window" in result.stdout and not out.exists()


def test_an_eager_run_without_the_step_profile_compares_attention_calls():
    """gpt-oss-20b's run (eager, no step profile): attention's GPU time is
    its calls' less the floor's; CoDec's TPOT under the floor's (noise of an
    eager MoE) gives no TPOT − floor ratio; a line for each FlashInfer peer,
    a figure where CoDec's is the higher one said so."""
    rows = {"codec": {"tpot_ms": 157.0, "tpot_p90_ms": 170.0, "tpot_minus_floor_ms": -3.0,
                      "attention_gpu_minus_floor_ms": 1.8},
            "noop": {"tpot_ms": 160.0, "tpot_p90_ms": 171.0, "attention_gpu_minus_floor_ms": 0.0},
            "fi_sink": {"tpot_ms": 163.0, "tpot_p90_ms": 175.0, "tpot_minus_floor_ms": 3.0,
                        "attention_gpu_minus_floor_ms": 5.4},
            "fi_decode": {"tpot_ms": 150.0, "tpot_p90_ms": 172.0, "tpot_minus_floor_ms": 1.0,
                          "attention_gpu_minus_floor_ms": 3.6}}
    result = {"workload": "samples:64", "model": "gpt-oss-20b", "rows": rows}
    attn = {b: a for b, _, a in pr.e2e_rows(result)}
    assert attn == {"codec": 1.8, "noop": None, "fi_sink": 5.4, "fi_decode": 3.6}
    lines = pr.e2e_summary([result])
    assert lines == ["- samples:64 (gpt-oss-20b): attention's GPU time 2.00× lower than FlashInfer decode's, "
                     "TPOT 1.05× higher.",
                     "- samples:64 (gpt-oss-20b): attention's GPU time 3.00× lower than FlashInfer attention-sink's, "
                     "TPOT 1.04× lower."], lines
    assert "**5.40**" in "\n".join(pr.e2e_table([result]))


def test_an_e2e_peer_that_computes_another_attention_is_not_compared():
    """gpt-oss's sinks: FlashInfer's decode wrapper has none, so its attention
    rows are far off fp64 and the summary names it instead of a speedup."""
    rows = {"codec": {"tpot_ms": 93.7, "tpot_p90_ms": 95.5, "tpot_minus_floor_ms": 3.1,
                      "attention_gpu_minus_floor_ms": 1.37, "attention_rel_l2_max": 2.1e-3},
            "noop": {"tpot_ms": 90.6, "tpot_p90_ms": 91.7, "tpot_minus_floor_ms": 0.0,
                     "attention_gpu_minus_floor_ms": 0.0, "attention_rel_l2_max": 1.0},
            "fi_decode": {"tpot_ms": 97.0, "tpot_p90_ms": 99.1, "tpot_minus_floor_ms": 6.4,
                          "attention_gpu_minus_floor_ms": 4.25, "attention_rel_l2_max": 1.55}}
    result = {"workload": "samples:64", "model": "gpt-oss-20b", "device": "NVIDIA H100 80GB HBM3", "rows": rows}
    assert pr.e2e_summary([result]) == ["- samples:64 (gpt-oss-20b, H100): FlashInfer decode computes another "
                                        "attention (relative error 1.55 against fp64): not compared."]
    table = pr.e2e_table([result])
    assert table[2] == "| samples:64 (gpt-oss-20b, H100) | CoDec | 93.70 (95.50) | 3.10 | – | **1.37** | – | 2.1e-03 |"
    assert table[3].endswith("| – | – | – | 1.0e+00 |")  # the floor: no attention time, zeros for attention


def test_a_sweeps_run_suffix_keeps_its_workloads_place_and_what_shares_nothing(tmp_path):
    q4 = [row("flat:64 q4", 0.100, fi_decode=("tc", 0.099, 0.003)),
          row("batch:64 q4", 0.100, fi_decode=("tc", 0.2, 0.003)),
          row("seq:512 q4", 0.100, fi_decode=("tc", 0.099, 0.003))]
    (tmp_path / "sweep_peers_q4_1.json").write_text(json.dumps(q4))
    (tmp_path / "machine_sweep_peers.txt").write_text("NVIDIA H100 80GB HBM3, 81559 MiB\n55d46fb\n")
    data = pr.load(str(tmp_path))
    assert [r["workload"] for r in data["sweeps"]["q4"]] == ["seq:512 q4", "batch:64 q4", "flat:64 q4"]
    block = pr.blocks(data)["peers-sweep"]
    assert block[0] == "Measured on one NVIDIA H100 80GB HBM3 (machine_sweep_peers.txt)."
    never = next(line for line in block if line.startswith("| 51: never behind"))
    assert "3 points, worst seq:512 q4 (4 query tokens) 0.99×; 1 behind | **missed** |" in never  # flat:64 q4 may be


def test_steps_with_prefill_chunks_give_issue_51s_engine_targets():
    """A run that records its steps' kinds: a table of each kind's attention time, and the targets against
    FlashInfer's prefill wrapper (within 1.1×), the causal SDPA of FlashInfer decode's run (3× below) and
    FlashInfer's best in mixed steps (2× below); a file from before the kinds gives neither."""
    def steps(prefill, mixed):
        return {"tpot_ms": 30.0, "tpot_p90_ms": 31.0, "prefill_step_attention_gpu_ms_median": prefill,
                "prefill_steps": 1, "mixed_step_attention_gpu_ms_median": mixed, "mixed_steps": 3}
    rows = {"codec": steps(40.0, 10.0), "noop": steps(5.0, 2.0), "fi_prefill": steps(42.0, 18.0),
            "fi_decode": steps(100.0, 30.0)}
    result = {"workload": "loogle:8", "cuda_graph": False, "scheduler": "fifo", "max_batch_tokens": 2048,
              "step_kinds": ["prompt", "prefill", "mixed"], "rows": rows}
    name = "loogle:8 (eager, FIFO, 2,048-token steps)"
    assert pr.e2e_steps_targets([result]) == [
        "| target | measured | |", "|---|---|---|",
        f"| 51: {name}, prefill steps over the cache ≤ 1.1× FlashInfer prefill's | CoDec 0.95× | met |",
        f"| 51: {name}, the same ≥ 3× below the causal SDPA's | 2.50× | **missed** |",
        f"| 51: {name}, mixed steps ≥ 2× below FlashInfer's | 1.80× | **missed** |"]
    table = pr.e2e_steps_table([result])
    assert table[0] == "| workload | backend | prefill steps over the cache: ms a step (steps) | mixed steps: ms a step " \
                       "(steps) |"
    assert table[2] == f"| {name} | CoDec | 40.00 (1) | 10.00 (3) |"
    old = {k: v for k, v in result.items() if k != "step_kinds"}  # its "prefill" steps may be prompts
    assert pr.e2e_steps_targets([old]) == [] and pr.e2e_steps_table([old]) == []
    # a peer whose steps held other work (another schedule) is not judged
    rows["fi_prefill"] = {**steps(42.0, 18.0), "prefill_steps": 2, "mixed_steps": 2}
    lines = pr.e2e_steps_targets([result])
    assert lines[2].endswith("| CoDec 0.95× | not like for like: FlashInfer prefill's steps (2 prefill, 2 mixed) are "
                             "not CoDec's (1 prefill, 3 mixed) |"), lines[2]
    assert lines[3].endswith("| **missed** |")  # FlashInfer decode's steps are CoDec's
    assert lines[4].endswith("| 1.80× | not like for like: FlashInfer prefill's steps (2 prefill, 2 mixed) are not "
                             "CoDec's (1 prefill, 3 mixed) |"), lines[4]


def test_a_ratio_needs_both_figures_above_zero():
    """A peer's TPOT − floor at or under zero (eager noise) gives no ratio, rather than a division by zero or a
    negative factor; a figure CoDec loses reads "higher"."""
    rows = {"codec": {"tpot_ms": 60.0, "tpot_p90_ms": 61.0, "tpot_minus_floor_ms": 2.0,
                      "attention_gpu_minus_floor_ms": 4.0},
            "noop": {"tpot_ms": 58.0, "tpot_p90_ms": 59.0, "attention_gpu_minus_floor_ms": 0.0},
            "fi_decode": {"tpot_ms": 57.0, "tpot_p90_ms": 60.0, "tpot_minus_floor_ms": 0.0,
                          "attention_gpu_minus_floor_ms": 2.0},
            "fi_prefill": {"tpot_ms": 66.0, "tpot_p90_ms": 70.0, "tpot_minus_floor_ms": -1.0,
                           "attention_gpu_minus_floor_ms": 8.0}}
    lines = pr.e2e_summary([{"workload": "loogle:8", "rows": rows}])
    assert lines == ["- loogle:8: attention's GPU time 2.00× higher than FlashInfer decode's, TPOT 1.05× higher.",
                     "- loogle:8: attention's GPU time 2.00× lower than FlashInfer prefill's, TPOT 1.10× lower."], lines
