// Parca's well-known profile types, with a human name and a one-line help each.

/** Keyed by the type without its `:delta` suffix (`name:sample_type:sample_unit:period_type:period_unit`). */
const KNOWN = {
  'process_cpu:samples:count:cpu:nanoseconds': ['On-CPU samples', 'How often each stack was running on a CPU, sampled at a fixed rate (Go: 100 Hz).'],
  'process_cpu:cpu:nanoseconds:cpu:nanoseconds': ['CPU time', 'Time each stack spent running on a CPU in the window.'],
  'process_cpu:CPU:nanoseconds:CPU:nanoseconds': ['CPU time', 'Time each stack spent running on a CPU in the window.'],
  'process_cpu:sample:count:CPU:nanoseconds': ['On-CPU samples', 'How often each stack was running on a CPU, sampled at a fixed rate.'],
  'parca_agent:samples:count:cpu:nanoseconds': ['On-CPU samples (eBPF agent)', 'Whole-machine CPU samples from the eBPF agent, every process and the kernel.'],
  'parca_agent_cpu:samples:count:cpu:nanoseconds': ['On-CPU samples (eBPF agent)', 'Whole-machine CPU samples from the eBPF agent, every process and the kernel.'],
  'memory:inuse_space:bytes:space:bytes': ['Memory in use (bytes)', 'Heap bytes allocated and not yet freed when the profile was taken.'],
  'memory:inuse_objects:count:space:bytes': ['Memory in use (objects)', 'Heap objects allocated and not yet freed when the profile was taken.'],
  'memory:alloc_space:bytes:space:bytes': ['Memory allocated (bytes)', 'Heap bytes allocated since the program started, freed or not: allocation pressure.'],
  'memory:alloc_objects:count:space:bytes': ['Allocations (objects)', 'Heap objects allocated since the program started, freed or not.'],
  'goroutine:goroutine:count:goroutine:count': ['Goroutines', 'Live goroutines by the stack where they are now (blocked or running).'],
  'block:contentions:count:contentions:count': ['Blocking contentions', 'How often goroutines blocked on channels, selects and locks.'],
  'block:delay:nanoseconds:contentions:count': ['Blocking time', 'Time goroutines spent blocked on channels, selects and locks.'],
  'mutex:contentions:count:contentions:count': ['Mutex contentions', 'How often a goroutine waited for a mutex held by another.'],
  'mutex:delay:nanoseconds:contentions:count': ['Mutex wait time', 'Time goroutines waited for mutexes held by others.'],
  'threadcreate:threadcreate:count:threadcreate:count': ['OS threads created', 'Stacks that led to the creation of new OS threads.'],
  'fgprof:samples:count:wallclock:nanoseconds': ['Wall-clock samples (fgprof)', 'On- and off-CPU time together: where goroutines spend wall-clock time.'],
  'fgprof:time:nanoseconds:wallclock:nanoseconds': ['Wall-clock time (fgprof)', 'On- and off-CPU time together: where goroutines spend wall-clock time.'],
  'process_cpu:wall:nanoseconds:wall:nanoseconds': ['Wall-clock time', 'Time each stack was seen, running or waiting.'],
};

/** The full type string (series `__name__`) of an entry of `/api/v1/profile_types`. */
export function typeString(t) {
  return `${t.name}:${t.sample_type}:${t.sample_unit}:${t.period_type}:${t.period_unit}${t.delta ? ':delta' : ''}`;
}

/** `{title, help}` for a type string; unknown types get a title built from their parts. */
export function describe(type) {
  const base = type.replace(/:delta$/, '');
  const known = KNOWN[base];
  if (known) return { title: known[0], help: known[1], known: true };
  const [name, sample, unit] = base.split(':');
  return {
    title: `${name || type} ${sample ? `(${sample}${unit ? `, ${unit}` : ''})` : ''}`.trim(),
    help: type.endsWith(':delta') ? 'A delta profile: each one covers the time since the previous.' : 'A profile type this UI has no description of.',
    known: false,
  };
}
