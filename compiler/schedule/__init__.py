"""The scheduler: tensor graph -> ordered kernels. `compiler.schedule.rangeify.create_schedule` runs its phases.

Modules, in pass order: bufferize (what to materialize), rangeify (kernels and their index math, and the driver),
simplify, assign (in-place writes), fuse (joining kernels), naming, cache (schedules of a graph's shape), shape.
"""
