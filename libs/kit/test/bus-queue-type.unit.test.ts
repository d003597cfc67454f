import { commonEnv, ConfigError, durableQueueArguments, loadConfig, QUORUM_DELIVERY_LIMIT } from '@lab/kit';

describe('LAB_BUS_QUEUE_TYPE', () => {
  it('is quorum unless set, classic when set so, and refuses anything else naming the variable', () => {
    expect(loadConfig(commonEnv, {}).LAB_BUS_QUEUE_TYPE).toBe('quorum');
    expect(loadConfig(commonEnv, { LAB_BUS_QUEUE_TYPE: 'classic' }).LAB_BUS_QUEUE_TYPE).toBe('classic');
    expect(() => loadConfig(commonEnv, { LAB_BUS_QUEUE_TYPE: 'stream' })).toThrow(ConfigError);
    expect(() => loadConfig(commonEnv, { LAB_BUS_QUEUE_TYPE: 'stream' })).toThrow(/LAB_BUS_QUEUE_TYPE/);
  });
});

describe('the arguments of a durable queue and its .retry and .dlq', () => {
  const q = 'lab.events.audit.records';

  it('on quorum queues: at-least-once dead-lettering (with reject-publish) from .retry back to the queue and from the queue to .dlq past the delivery limit', () => {
    expect(durableQueueArguments('quorum', q, 'main', 600_000)).toEqual({
      'x-queue-type': 'quorum',
      'x-expires': 600_000,
      'x-delivery-limit': QUORUM_DELIVERY_LIMIT,
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': `${q}.dlq`,
      'x-dead-letter-strategy': 'at-least-once',
      'x-overflow': 'reject-publish',
    });
    expect(durableQueueArguments('quorum', q, 'retry', 600_000)).toEqual({
      'x-queue-type': 'quorum',
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': q,
      'x-dead-letter-strategy': 'at-least-once',
      'x-overflow': 'reject-publish',
    });
    expect(durableQueueArguments('quorum', q, 'dlq', 600_000)).toEqual({ 'x-queue-type': 'quorum' });
  });

  it('on classic queues: those of the queues declared before the type was configurable, plus the type', () => {
    expect(durableQueueArguments('classic', q, 'main')).toEqual({ 'x-queue-type': 'classic' });
    expect(durableQueueArguments('classic', q, 'main', 60_000)).toEqual({ 'x-queue-type': 'classic', 'x-expires': 60_000 });
    expect(durableQueueArguments('classic', q, 'retry', 60_000)).toEqual({
      'x-queue-type': 'classic',
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': q,
    });
    expect(durableQueueArguments('classic', q, 'dlq')).toEqual({ 'x-queue-type': 'classic' });
  });
});
