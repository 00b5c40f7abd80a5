<?php
// A known call chain for the agent's PHP frame tests: outer_loop → Worker::middle_step →
// inner_hot, with nearly all the time in inner_hot. Runs for $argv[1] seconds.

function inner_hot(int $n): int
{
    $total = 0;
    for ($i = 0; $i < $n; $i++) {
        $total += $i * $i;
    }
    return $total;
}

class Worker
{
    public function middle_step(int $n): int
    {
        return inner_hot($n);
    }
}

function outer_loop(float $seconds): void
{
    $worker = new Worker();
    $end = microtime(true) + $seconds;
    while (microtime(true) < $end) {
        $worker->middle_step(20000);
    }
}

outer_loop((float) $argv[1]);
