<?php
// PHP code called back from a built-in function, which calls built-ins itself: run →
// via_callback → array_map (built-in) → hash_leaf (entered from native code) → md5 (built-in).
// Runs for $argv[1] seconds.

function hash_leaf(string $s): string
{
    $h = $s;
    for ($i = 0; $i < 200; $i++) {
        $h = md5($h);
    }
    return $h;
}

function via_callback(array $items): array
{
    return array_map('hash_leaf', $items);
}

function run(float $seconds): void
{
    $items = array_map('strval', range(1, 50));
    $end = microtime(true) + $seconds;
    while (microtime(true) < $end) {
        via_callback($items);
    }
}

run((float) $argv[1]);
