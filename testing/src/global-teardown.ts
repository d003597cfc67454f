import { stopContainers } from './containers';

export default async function globalTeardown(): Promise<void> {
  await stopContainers();
}
