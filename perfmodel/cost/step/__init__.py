"""One training step of many plans at once: units, communication, pipeline, data parallelism, memory.

Step time = pipeline time of the m micro-batches (slowest stage, plus the bubble)
          + exposed data-parallel / ZeRO-1/2 communication + the optimizer step
          (+ the optimizer state's copies from and to host memory where it is kept there, cost.memory.offload).
A stage is built from units (its layers, plus the embedding on the first stage and the LM head and loss on
the last). Per micro-batch a unit costs its operators' forward, backward and recomputed forward
(`cost.compute.units.op_kernels`) plus the exposed communication it causes:
  - the tensors its operators pass to each other (tensor parallelism): never overlapped, except the sequence-
    parallel re-gather of a GEMM's input in the backward (`cost.comm.sharded.edge_cost`);
  - context-parallel key/value exchange: overlapped with the attention kernel (`cost.comm.sharded.kv_exchange`);
  - ZeRO-3 weight gathers and gradient reduce-scatters: overlapped with the compute of the unit they serve,
    except the embedding's, which starts the forward and ends the backward with nothing to hide behind;
  - pipeline sends: exposed.
The host launches every kernel and collective ahead of the device (cost.host.launch_queue): a stage's micro-batch takes the
longer of its device seconds and its host's (`host`: the seconds the device waits), and the step's end the longer
of the device's reduction and update and the host's optimizer loop (the stack's calls, priced on the system's host:
cost.host.launch_queue.host_rates). Data-parallel gradient reduction (every
micro-batch for ZeRO-2, once otherwise) overlaps the backward of the last micro-batch except its last layer's
bucket (torch DDP's last bucket where the stack names its buckets: Stack.ddp_buckets); ZeRO-1/2 weight gathers overlap the first forward of the next step likewise (ZeRO-1's only where the
stack's overlap_param_gather says so); with pp > 1 and tied embeddings, the first and last stages all-reduce the
embedding gradient (exposed); with sequence parallelism the tp group all-reduces the gradients of the weights
it keeps whole (norms, row-parallel biases) in one flat call (exposed).

On a spec calibrated from measured runs the parts are scaled last (`run_fit.calibrated`).

One module per stage, in the order `evaluate` runs them:
- `evaluate`: the composition (`evaluate`, returning a `Step`) and the step's FLOPs.
- `stage`: one layer, the embedding and the head per micro-batch; a stage's sends; the slowest stage and the
  pipeline's seconds.
- `data_parallel`: the stage with most parameters, its gradient reductions, ZeRO gathers, step syncs, optimizer
  step and offloaded state's copies.
- `host`: the host's launches, calls and seconds per step.
- `breakdown`: the TimeBreakdown parts, summing to the step.
- `clock`: the step at the clock its own mix sustains under the power limit.
- `run_fit`: the parts scaled by a calibration from measured runs.

Every quantity is a numpy array with one entry per plan (`Layouts` columns), and stage quantities have a
leading axis over the stage kinds (first, middle, last; or each stage of an explicit split). It imports what `cost`
may: `spec` and the rest of `cost`.
"""
