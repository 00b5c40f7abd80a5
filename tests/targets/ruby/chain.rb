# A known call chain for the agent's Ruby frame tests: Object#outer_loop → Worker#middle_step →
# Jobs::Hot.inner_hot (a singleton method of a nested module), with nearly all the time in
# inner_hot. Runs for ARGV[0] seconds.

module Jobs
  module Hot
    def self.inner_hot(n)
      total = 0
      i = 0
      while i < n
        total += i * i
        i += 1
      end
      total
    end
  end
end

class Worker
  def middle_step(n)
    Jobs::Hot.inner_hot(n)
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
