// A known call chain for the agent's Node.js frame tests: outer_loop → Worker.middle_step →
// inner_hot, with nearly all the time in inner_hot, run from the event loop as a server runs
// its handlers (tick, setImmediate). Runs for process.argv[2] seconds.
'use strict';

function inner_hot(n) {
  let total = 0;
  for (let i = 0; i < n; i++) {
    total = (total + i * i) % 1000003;
  }
  return total;
}

class Worker {
  middle_step(n) {
    return inner_hot(n);
  }
}

function outer_loop(worker) {
  let sink = 0;
  for (let k = 0; k < 10; k++) {
    sink += worker.middle_step(20000);
  }
  return sink;
}

const finish = Date.now() + Number(process.argv[2]) * 1000;
const worker = new Worker();
let sink = 0;

function tick() {
  sink += outer_loop(worker);
  if (Date.now() < finish) {
    setImmediate(tick);
  }
}

tick();
