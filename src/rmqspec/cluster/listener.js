'use strict';
// The listener side of a serve-cluster history, for JavaScript clients (e.g. npm's ali-ons).
//
// A few lines in a client's message handler write what it was handed, one check-history `deliver`
// event per message (no header; `rmqspec merge-history` adds the broker's side):
//
//   const { DeliveryLog } = require('/path/to/rmqspec/cluster/listener.js');
//   const deliveries = new DeliveryLog('deliveries.jsonl', 'c1'); // c1: the client's instanceName
//   consumer.subscribe(topic, '*', async msg => {
//     ...                                                    // the application's work
//     deliveries.record(msg.topic, msg.queueId, msg.queueOffset); // or 'failure' as a fourth argument
//   });
//
// Only Node's standard library is used; lines are written synchronously, one by one.
const fs = require('fs');

class DeliveryLog {
  constructor(path, consumer) {
    this.consumer = consumer;
    this.fd = fs.openSync(path, 'a');
  }

  record(topic, queue, offset, result) {
    if (this.fd === null) return;
    const event = {
      time: Date.now() + (Number(process.hrtime.bigint() % 1000000n) / 1e6),
      type: 'deliver',
      consumer: this.consumer,
      topic,
      queue: Number(queue),
      offset: Number(offset),
      result: result || 'success',
    };
    fs.writeSync(this.fd, JSON.stringify(event) + '\n');
  }

  close() {
    if (this.fd !== null) {
      fs.closeSync(this.fd);
      this.fd = null;
    }
  }
}

module.exports = { DeliveryLog };
