# Ruby code called back from a C method: run → via_each → Array#each (C) → the block, which
# calls hash_leaf. Runs for ARGV[0] seconds.
require "digest"

def hash_leaf(s)
  h = s
  200.times { h = Digest::MD5.hexdigest(h) }
  h
end

def via_each(items)
  out = []
  items.each { |item| out << hash_leaf(item) }
  out
end

def run(seconds)
  items = (1..50).map(&:to_s)
  finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
    via_each(items)
  end
end

run(ARGV[0].to_f)
