// Loaded with `node --require` into every process the chart runner starts: it
// records each outbound TCP connection the process opens (address and port, once
// connected) as a JSON line in LAB_CONNECTION_LOG, through Node's public
// diagnostics channel for client sockets (every net.Socket#connect: pg, amqplib,
// ioredis, http, grpc-js). It observes only; the process runs unchanged.
'use strict';
const { subscribe } = require('node:diagnostics_channel');
const { appendFileSync } = require('node:fs');

const file = process.env.LAB_CONNECTION_LOG;
if (file) {
  subscribe('net.client.socket', ({ socket }) => {
    socket.once('connect', () => {
      if (socket.remoteAddress) appendFileSync(file, `${JSON.stringify({ ip: socket.remoteAddress, port: socket.remotePort })}\n`);
    });
  });
}
