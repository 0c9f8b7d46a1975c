#!/usr/bin/env node
// Prints the node flags that `npm start` and bench/peer-extra.sh put on node's command line for
// `keybroker start`: core/v8-tuning.ts's NODE_FLAGS for this node where it cannot replace a
// running process (Node 20, Node 22 before 22.15), and nothing where it can, since `start` then
// relaunches itself with those flags and its launch environment (decisions 183 and 187).
import { NODE_FLAGS } from "../dist/core/v8-tuning.js";

console.log(typeof process.execve === "function" ? "" : NODE_FLAGS.join(" "));
