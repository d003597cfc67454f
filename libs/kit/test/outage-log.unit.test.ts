import pino from 'pino';
import { OutageLog } from '@lab/kit';

function recording() {
  const lines: Record<string, any>[] = [];
  const log = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, any>) });
  return { log, lines };
}

describe('OutageLog', () => {
  it('logs an outage once as it begins and once as it ends, with the count of failures', () => {
    const { log, lines } = recording();
    const outages = new OutageLog(log, { fields: { component: 'test' } });
    outages.success('redis');
    for (let i = 0; i < 50; i++) outages.failure('redis', new Error(`connect ECONNREFUSED (${i})`));
    expect(outages.isDown('redis')).toBe(true);
    expect(outages.failures('redis')).toBe(50);
    outages.success('redis');
    outages.success('redis');
    expect(lines.map((l) => l.msg)).toEqual(['redis unavailable', 'redis available again after 50 failures']);
    expect(lines[0]).toMatchObject({ level: 40, dependency: 'redis', state: 'unavailable', component: 'test', err: 'connect ECONNREFUSED (0)' });
    expect(lines[1]).toMatchObject({ level: 30, dependency: 'redis', state: 'available', failures: 50, last_err: 'connect ECONNREFUSED (49)' });
    expect(outages.isDown('redis')).toBe(false);
  });

  it('keeps each dependency apart', () => {
    const { log, lines } = recording();
    const outages = new OutageLog(log);
    outages.failure('notebook', new Error('a'));
    outages.failure('audit', new Error('b'));
    outages.failure('notebook', new Error('c'));
    outages.success('audit');
    expect(lines.map((l) => l.msg)).toEqual(['notebook unavailable', 'audit unavailable', 'audit available again after 1 failures']);
    expect(outages.isDown('notebook')).toBe(true);
  });

  it('reminds of a long outage with the count so far, not once per failure', () => {
    const { log, lines } = recording();
    // every failure is "due" a reminder at 0 ms apart only if the interval allows it: 0 turns reminders off
    const off = new OutageLog(log, { remindEveryMs: 0 });
    for (let i = 0; i < 10; i++) off.failure('bus', new Error('x'));
    expect(lines).toHaveLength(1);
    const now = Date.now;
    let t = now();
    Date.now = () => t;
    try {
      const every = new OutageLog(log, { remindEveryMs: 60_000 });
      every.failure('db', new Error('x'));
      for (let i = 0; i < 5; i++) every.failure('db', new Error('x'));
      t += 61_000;
      every.failure('db', new Error('x'));
      every.failure('db', new Error('x'));
    } finally {
      Date.now = now;
    }
    expect(lines.slice(1).map((l) => l.msg)).toEqual(['db unavailable', 'db still unavailable after 7 failures']);
  });
});
