# A known call chain for the agent's Ruby frame tests: outer_loop → Worker#middle_step →
# inner_hot, with nearly all the time in inner_hot. Runs for ARGV[0] seconds.

def inner_hot(n)
  total = 0
  i = 0
  while i < n
    total += i * i
    i += 1
  end
  total
end

class Worker
  def middle_step(n)
    inner_hot(n)
  end
end

def outer_loop(seconds)
  worker = Worker.new
  finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
    worker.middle_step(20000)
  end
end

outer_loop(ARGV[0].to_f)
