#!/usr/bin/env python3
"""One PyTorch CPU trial of the fcsnn workload, the baseline of bench/cpu/fcsnn_vs_torch.py.

The network is what `snn bench fcsnn` builds (src/models/fcsnn.c through tools/snn/bench_core.c):
(depth - 1) x [Linear -> LIF] -> Linear, on input [T, N, in] with the Linear layers applied to
the T*N rows at once, cross-entropy on the output's mean over T, SGD with momentum.

The LIF neuron is written the way SpikingJelly's torch backend runs it (multi-step mode: a
Python loop over T of single steps, autograd through the loop for BPTT):
    h = v + (x - v) / tau                  (decay_input, v_reset 0)
    s = H(h - v_th)                        (surrogate gradient in backward)
    v = (1 - s) * h + s * v_reset          (hard reset, v_reset 0, reset not detached)
with tau 2, v_th 1 and the Sigmoid(alpha 4) surrogate, d s / d h = alpha sig(alpha u) (1 - sig(alpha u)),
u = h - v_th: the defaults of snn_neuron_defaults() that fcsnn uses.

Prints one JSON object: timings per step (training split into forward, loss, backward,
optimizer), samples/s, the BLAS libraries mapped into the process, and a torch.mm rate.
"""
import argparse
import json
import os
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--time-steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--input-dim", type=int, default=784)
    p.add_argument("--hidden-dim", type=int, default=1024)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--depth", type=int, default=3, help="Linear layers (as snn bench fcsnn --depth)")
    p.add_argument("--tau", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--training-steps", type=int, default=5)
    p.add_argument("--inference-steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=20260531)
    p.add_argument("--mm-size", type=int, default=2048, help="square torch.mm for the GEMM rate (0: skip)")
    return p.parse_args()


def blas_maps():
    """The BLAS/LAPACK/OpenMP shared objects actually mapped (what libblas.so.3 resolved to)."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if "/" in line else ""
                base = os.path.basename(path)
                if any(k in base for k in ("blas", "lapack", "gomp", "mkl", "blis")):
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    return sorted(libs)


def main():
    a = parse()
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    class SigmoidSpike(torch.autograd.Function):
        """Heaviside forward, alpha-scaled logistic derivative backward."""

        @staticmethod
        def forward(ctx, u, alpha):
            ctx.save_for_backward(u)
            ctx.alpha = alpha
            return (u >= 0).to(u.dtype)

        @staticmethod
        def backward(ctx, g):
            (u,) = ctx.saved_tensors
            sg = torch.sigmoid(ctx.alpha * u)
            return g * ((1.0 - sg) * sg * ctx.alpha), None

    class LIF(torch.nn.Module):
        def __init__(self, tau, v_th=1.0, v_reset=0.0, alpha=4.0):
            super().__init__()
            self.tau, self.v_th, self.v_reset, self.alpha = tau, v_th, v_reset, alpha

        def forward(self, x_seq):  # [T, N, F]
            v = torch.zeros_like(x_seq[0])  # v_reset = 0
            out = []
            for t in range(x_seq.shape[0]):
                h = v + (x_seq[t] - v) / self.tau
                s = SigmoidSpike.apply(h - self.v_th, self.alpha)
                v = (1.0 - s) * h + s * self.v_reset  # the general form, as the reference runs it
                out.append(s)
            return torch.stack(out)

    class SeqLinear(torch.nn.Linear):
        """Linear over the T*N rows at once (SpikingJelly's multi-step layer.Linear)."""

        def forward(self, x):
            T, N = x.shape[0], x.shape[1]
            return super().forward(x.flatten(0, 1)).view(T, N, -1)

    layers, width = [], a.input_dim
    for _ in range(a.depth - 1):
        layers += [SeqLinear(width, a.hidden_dim), LIF(a.tau)]
        width = a.hidden_dim
    layers.append(SeqLinear(width, a.num_classes))
    net = torch.nn.Sequential(*layers)

    x = torch.randn(a.time_steps, a.batch_size, a.input_dim)
    y = torch.randint(0, a.num_classes, (a.batch_size,))
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    ce = torch.nn.CrossEntropyLoss()

    net.train()
    split = {"forward": 0.0, "loss": 0.0, "backward": 0.0, "optimizer": 0.0}
    loss_v = float("nan")
    train_s = train_cpu = 0.0
    for phase, steps in (("warmup", a.warmup), ("timed", a.training_steps)):
        t_start, c_start = time.perf_counter(), time.process_time()
        for _ in range(steps):
            t0 = time.perf_counter()
            out = net(x)
            t1 = time.perf_counter()
            loss = ce(out.mean(0), y)
            t2 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t3 = time.perf_counter()
            opt.step()
            t4 = time.perf_counter()
            if phase == "timed":
                split["forward"] += t1 - t0
                split["loss"] += t2 - t1
                split["backward"] += t3 - t2
                split["optimizer"] += t4 - t3
        if phase == "timed":
            train_s = time.perf_counter() - t_start
            train_cpu = time.process_time() - c_start
            loss_v = float(loss)

    net.eval()
    infer_s = infer_cpu = 0.0
    with torch.inference_mode():
        for phase, steps in (("warmup", a.warmup), ("timed", a.inference_steps)):
            t_start, c_start = time.perf_counter(), time.process_time()
            for _ in range(steps):
                out = net(x)
            if phase == "timed":
                infer_s = time.perf_counter() - t_start
                infer_cpu = time.process_time() - c_start
        checksum = float(out.double().sum())

    mm = None
    if a.mm_size > 0:
        n = a.mm_size
        A, B = torch.rand(n, n) - 0.5, torch.rand(n, n) - 0.5
        torch.mm(A, B)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            torch.mm(A, B)
            ts.append(time.perf_counter() - t0)
        mm = {"n": n, "gflops_median": 2.0 * n ** 3 / statistics.median(ts) * 1e-9,
              "gflops_best": 2.0 * n ** 3 / min(ts) * 1e-9}

    ts_ = a.training_steps
    res = {
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "blas_libraries": blas_maps(),
        "training_ms": train_s * 1e3 / ts_,
        "training_samples_per_sec": a.batch_size * ts_ / train_s,
        "inference_ms": infer_s * 1e3 / a.inference_steps,
        "inference_samples_per_sec": a.batch_size * a.inference_steps / infer_s,
        "forward_ms": split["forward"] * 1e3 / ts_,
        "loss_ms": split["loss"] * 1e3 / ts_,
        "backward_ms": split["backward"] * 1e3 / ts_,
        "optimizer_ms": split["optimizer"] * 1e3 / ts_,
        "training_cpu_ms": train_cpu * 1e3 / ts_,
        "inference_cpu_ms": infer_cpu * 1e3 / a.inference_steps,
        "final_loss": loss_v,
        "output_checksum": checksum,
        "torch_mm": mm,
    }
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
