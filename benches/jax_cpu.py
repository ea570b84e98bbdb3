"""The CPU anchor for convoy on a software adapter (BENCHMARKS.md: "On a CPU").

JAX (XLA's CPU backend) on the same cores as lavapipe: the mlp of `convoy bench --model mlp`
(Flatten, Dense 256, ReLU, Dense 128, ReLU, Dense 10 on 32x32x3 images; softmax cross-entropy;
SGD lr 0.05, Nesterov momentum 0.9, L2 5e-4 on the kernels, as convoy's bench) one jitted
training step, and a 1024^3 float32 matmul.

    pip install jax   # CPU wheel
    python3 benches/jax_cpu.py [BATCH ...]
"""
import sys
import time

import jax
import jax.numpy as jnp


def best_of(fn, reps=20):
    fn()  # compile and warm up
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def mlp_step_seconds(batch):
    key = jax.random.PRNGKey(0)
    sizes = [3072, 256, 128, 10]
    params = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        params.append((jax.random.normal(jax.random.fold_in(key, i), (a, b)) * (2.0 / a) ** 0.5, jnp.zeros(b)))
    velocity = jax.tree_util.tree_map(jnp.zeros_like, params)
    x = jax.random.uniform(key, (batch, 32, 32, 3))
    y = jax.random.randint(key, (batch,), 0, 10)

    def loss(params, x, y):
        h = x.reshape(x.shape[0], -1)
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def step(params, velocity, x, y):
        grads = jax.grad(loss)(params, x, y)
        grads = [(gw + 5e-4 * w, gb) for (w, _), (gw, gb) in zip(params, grads)]
        velocity = jax.tree_util.tree_map(lambda v, g: 0.9 * v + g, velocity, grads)
        update = jax.tree_util.tree_map(lambda v, g: g + 0.9 * v, velocity, grads)
        params = jax.tree_util.tree_map(lambda p, u: p - 0.05 * u, params, update)
        return params, velocity

    return best_of(lambda: jax.block_until_ready(step(params, velocity, x, y)))


def matmul_gflops(n=1024):
    a = jax.random.normal(jax.random.PRNGKey(1), (n, n))
    b = jax.random.normal(jax.random.PRNGKey(2), (n, n))
    f = jax.jit(lambda a, b: a @ b)
    return 2 * n**3 / best_of(lambda: jax.block_until_ready(f(a, b))) / 1e9


if __name__ == "__main__":
    print(f"jax {jax.__version__} on {jax.devices()}")
    for batch in [int(b) for b in sys.argv[1:]] or [128, 256]:
        s = mlp_step_seconds(batch)
        print(f"mlp batch {batch}: {s * 1e3:.2f} ms/step, {batch / s:,.0f} images/s")
    print(f"matmul 1024^3: {matmul_gflops():.1f} GFLOP/s")
