/**
 * The realtime channel, a subsystem the gateway mounts: the server-sent
 * `job.updated` stream of background_jobs. It subscribes to the bus, keeps the
 * open streams under their caps (per token, per organisation, per replica),
 * beats, ends them after their lifetime and offers each event only to the
 * callers allowed to see the job. The runtime authenticates, counts and routes
 * the request, then hands the response to it.
 */
export { JobEventsHub, realtimeStreamsPerOrgSetting, type JobEventsOptions, type StreamPrincipal } from './job-stream.js';
