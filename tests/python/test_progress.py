"""test_progress.py: Plan.run's progress and checkpoints from Python
(issue 31): watch= gives each step's loss in Outputs.history (the first
equals NumPy's loss of the initial weights, worked out independently),
on_step gets a StepInfo per step counted over the whole run, init_state=
"zeros" starts Adam's state, and a run checkpointed every 100 steps then
resumed equals an uninterrupted one bit for bit, its steps going on from
201; the command line's checkpoints of the same plan file resume here.
"""
import sanitize  # noqa: F401  (first: an ASan build restarts with the runtime)
import os
import pathlib
import subprocess
import tempfile

import numpy as np
import tessel

SRC = pathlib.Path(os.environ.get("TESSEL_SRC", pathlib.Path(__file__).resolve().parents[2]))
TESSEL = os.environ.get("TESSEL_BIN")

step = tessel.grad(SRC / "examples" / "mlp_loss.hlo", wrt="w1,w2", adam=0.01)
rng = np.random.default_rng(0)
x, w1, w2, t = (rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32, 8), (8, 8)])
ins = {"x": x, "w1": w1, "w2": w2, "target": t}

with tempfile.TemporaryDirectory(prefix="tessel-progress.") as work:
    plan = step.compile()
    plan.save(os.path.join(work, "adam.plan"))
    plan = tessel.load_plan(os.path.join(work, "adam.plan"))
    # the state must be bound or started: the error says how
    try:
        plan.run(ins, steps=2)
        raise AssertionError("Adam's state unbound, and the run did not fail")
    except tessel.Error as e:
        assert "init-state zeros" in str(e) and "--random-inputs" not in str(e), str(e)
    full = plan.run(ins, steps=300, init_state="zeros", watch="loss")
    assert len(full.history) == 300
    want = np.mean((np.tanh(x.astype(np.float64) @ w1) @ w2 - t) ** 2)
    assert abs(full.history[0] - want) <= 1e-5 * abs(want), (full.history[0], want)
    assert full.history[-1] < full.history[0] / 10, "Adam did not lower the loss"
    seen = []
    ck = os.path.join(work, "ck")
    a = plan.run(ins, steps=200, init_state="zeros", watch="loss", checkpoint_every=100, checkpoint_dir=ck,
                 on_step=seen.append)
    assert [s.step for s in seen] == list(range(1, 201)) and {s.steps for s in seen} == {200}
    assert [s.watched for s in seen] == a.history == full.history[:200]
    assert sorted(os.listdir(ck)) == ["step-100", "step-200"], os.listdir(ck)
    seen.clear()
    b = plan.run(ins, steps=300, init_state="zeros", watch="loss", resume=ck, on_step=seen.append)
    assert [s.step for s in seen] == list(range(201, 301)) and seen[0].steps == 300
    assert b.history == full.history[200:]
    assert all(np.array_equal(u, v) for u, v in zip(full, b)), "resumed != uninterrupted"
    print("test_progress: 300 Adam steps; checkpointed at 100, 200 and resumed at 201: bit-identical")
    if TESSEL:
        for k, v in ins.items():
            np.save(os.path.join(work, k + ".npy"), v)
        cl = os.path.join(work, "cl")
        subprocess.run([TESSEL, "run", os.path.join(work, "adam.plan"), "--init-state", "zeros", "--steps", "100",
                        "--checkpoint-every", "100", "--checkpoint-dir", cl]
                       + sum((["--input", "%s=%s" % (k, os.path.join(work, k + ".npy"))] for k in ins), []),
                       check=True, capture_output=True)
        c = plan.run(ins, steps=300, init_state="zeros", resume=cl)
        assert all(np.array_equal(u, v) for u, v in zip(full, c)), "the command line's checkpoint resumed differs"
        print("test_progress: the command line's checkpoint resumed from Python: bit-identical")
    # issue 30: a resume with other inputs than the checkpoint's is refused
    # naming the input (it resumed from other data); an edited "digest" in
    # checkpoint.json is named and passed over (it was skipped silently).
    try:
        plan.run(dict(ins, x=x[::-1].copy()), steps=300, init_state="zeros", resume=ck)
        raise AssertionError("a resume with another x was accepted")
    except tessel.Error as e:
        assert "step-200: input 0 has other content" in str(e), str(e)
    try:
        plan.run(ins, steps=300, init_state="zeros", resume=ck, random=5)
        raise AssertionError("a resume with another seed was accepted")
    except tessel.Error as e:
        assert "it was taken with random=none, this run gives random=5" in str(e), str(e)
    cj = os.path.join(ck, "step-200", "checkpoint.json")
    with open(cj) as f:
        text = f.read()
    with open(cj, "w") as f:
        f.write(text.replace('"digest": "', '"digest": "0', 1))
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = plan.run(ins, steps=300, init_state="zeros", resume=ck)
    assert any("step-200 is not used: checkpoint.json's \"checkpoint_sha256\"" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    assert all(np.array_equal(u, v) for u, v in zip(full, d)), "resumed from step 100 != uninterrupted"
    print("test_progress: other inputs on resume refused; an edited checkpoint digest named and passed over")
    try:
        plan.run(ins, init_state="ones")
        raise AssertionError("init_state='ones' accepted")
    except ValueError:
        pass
print("test_progress: ok")
