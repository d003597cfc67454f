import { createLogger, Housekeeping } from '@lab/kit';

/**
 * Housekeeping's timing on a faked clock: when passes run and that none runs
 * after stop() are facts of its timers, held here without waiting on real time.
 * (ops.int.test.ts runs the rules through runService against PostgreSQL.)
 */
const log = createLogger('test', 'silent');

beforeEach(() => {
  jest.useFakeTimers();
});
afterEach(() => {
  jest.useRealTimers();
});

describe('housekeeping', () => {
  it('runs a first pass after firstMs, then one every everyMs from the end of the last; a failing rule does not stop the next', async () => {
    const ran: string[] = [];
    const hk = new Housekeeping(
      [
        [
          'failing',
          () => {
            ran.push('failing');
            return Promise.reject(new Error('always fails'));
          },
        ],
        ['counting', () => Promise.resolve(ran.push('counting'))],
      ],
      log,
      { everyMs: 50, firstMs: 10 },
    );
    hk.start();
    await jest.advanceTimersByTimeAsync(9);
    expect(ran).toEqual([]);
    await jest.advanceTimersByTimeAsync(1);
    expect(ran).toEqual(['failing', 'counting']);
    await jest.advanceTimersByTimeAsync(100);
    expect(ran).toHaveLength(6);
    await hk.stop();
  });

  it('runs no pass after stop(), and leaves no timer behind', async () => {
    let passes = 0;
    const hk = new Housekeeping([['count', () => Promise.resolve(++passes)]], log, { everyMs: 50, firstMs: 50 });
    hk.start();
    await jest.advanceTimersByTimeAsync(150);
    expect(passes).toBe(3);
    await hk.stop();
    expect(jest.getTimerCount()).toBe(0);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(passes).toBe(3);
  });

  it('schedules nothing more when stopped while a pass is under way, and stop() waits for that pass', async () => {
    let finish!: () => void;
    let passes = 0;
    const hk = new Housekeeping(
      [
        [
          'slow',
          () => {
            passes++;
            return new Promise<number>((resolve) => (finish = () => resolve(0)));
          },
        ],
      ],
      log,
      { everyMs: 50, firstMs: 50 },
    );
    hk.start();
    await jest.advanceTimersByTimeAsync(50);
    expect(passes).toBe(1);
    let stopped = false;
    const stopping = hk.stop().then(() => (stopped = true));
    await jest.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    finish();
    await stopping;
    expect(jest.getTimerCount()).toBe(0);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(passes).toBe(1);
  });
});
