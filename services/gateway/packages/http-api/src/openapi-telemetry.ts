import { nullableOf as nullable, schemaRef as ref, TIME, UUID, type Json } from './openapi-parts.js';

/**
 * The answers of the telemetry service (module analytics_qc) as it renders them
 * (json_build_object in services/telemetry/src: pointJson, readingJson,
 * deviceJson, resultJson, connectorJson, the chart): one closed schema each.
 */
const closed = (properties: Record<string, Json>, description?: string): Json => ({
  type: 'object',
  ...(description ? { description } : {}),
  required: Object.keys(properties),
  properties,
  additionalProperties: false,
});
const id = { ...UUID, readOnly: true };
const createdBy = { ...nullable(UUID), readOnly: true };

export const TELEMETRY_SCHEMAS: Record<string, Json> = {
  EnvironmentalPoint: closed({
    id,
    external_code: nullable({ type: 'string' }),
    parameter: { type: 'string', examples: ['temperature'] },
    unit: { type: 'string' },
    limit_min: nullable({ type: 'number' }),
    limit_max: nullable({ type: 'number' }),
    room_id: nullable(UUID),
    equipment_id: nullable(UUID),
    active: { type: 'boolean' },
    created_at: TIME,
    updated_at: TIME,
  }),
  EnvironmentalReading: closed({
    id,
    point_id: UUID,
    external_code: nullable({ type: 'string' }),
    parameter: { type: 'string' },
    value: { type: 'number' },
    unit: { type: 'string' },
    limit_min: nullable({ type: 'number' }),
    limit_max: nullable({ type: 'number' }),
    is_breach: { type: 'boolean', readOnly: true, description: 'outside the limits the point had when the reading was stored' },
    measured_at: TIME,
    sample_id: nullable(UUID),
    notes: nullable({ type: 'string' }),
    created_by: createdBy,
    created_at: TIME,
  }),
  Device: closed({
    id,
    name: { type: 'string' },
    identifier: { type: 'string' },
    kind: nullable({ type: 'string' }),
    manufacturer: nullable({ type: 'string' }),
    model: nullable({ type: 'string' }),
    serial_number: nullable({ type: 'string' }),
    connector_id: nullable(UUID),
    metadata: { type: 'object' },
    created_by: createdBy,
    created_at: TIME,
    updated_at: TIME,
  }),
  Result: closed({
    id,
    device_id: { ...nullable(UUID), description: 'null once its device was deleted (results outlive it)' },
    device_identifier: nullable({ type: 'string' }),
    sample_id: nullable(UUID),
    sample_ref: nullable({ type: 'string' }),
    measured_at: TIME,
    values: { type: 'array', items: { type: 'object', required: ['name'], properties: { name: { type: 'string' }, unit: { type: 'string' } } } },
    metadata: { type: 'object' },
    raw_file: {
      ...nullable({ type: 'object' }),
      required: ['id', 'filename', 'size', 'sha256', 'content_type'],
      properties: { id: UUID, filename: { type: 'string' }, size: { type: 'integer' }, sha256: { type: 'string' }, content_type: { type: 'string' } },
      additionalProperties: false,
    },
    created_by: createdBy,
    created_at: TIME,
  }),
  ResultChart: closed({
    result_id: UUID,
    device_id: nullable(UUID),
    measured_at: TIME,
    series: {
      type: 'array',
      items: {
        type: 'object',
        required: ['name', 'unit', 'points'],
        properties: {
          name: { type: 'string' },
          unit: nullable({ type: 'string' }),
          points: { type: 'array', items: { type: 'object', required: ['x', 'y'], properties: { x: TIME, y: {} } } },
        },
      },
    },
  }),
  Connector: closed({
    id,
    name: { type: 'string' },
    version: nullable({ type: 'string' }),
    host: nullable({ type: 'string' }),
    last_seen_at: nullable(TIME),
    status: { type: 'string', enum: ['online', 'stale', 'offline'], readOnly: true, description: 'online: seen within 2 minutes; stale: within 15' },
    device_count: { type: 'integer', minimum: 0, readOnly: true },
    created_by: createdBy,
    created_at: TIME,
    updated_at: TIME,
  }),
};

/** A batch of readings: each stored or rejected on its own. */
TELEMETRY_SCHEMAS.ReadingsIngested = closed({
  created: { type: 'integer', minimum: 0 },
  breaches: { type: 'integer', minimum: 0, description: 'stored readings outside their limits (an environmental.breach event each)' },
  readings: { type: 'array', items: ref('EnvironmentalReading') },
  rejected: {
    type: 'array',
    items: {
      type: 'object',
      required: ['index', 'code', 'message'],
      properties: {
        index: { type: 'integer', minimum: 0, description: 'of the reading in the request' },
        code: { type: 'string', enum: ['point_not_found', 'point_inactive', 'validation_failed'] },
        message: { type: 'string' },
        point_id: { type: 'string' },
        external_code: { type: 'string' },
      },
      additionalProperties: false,
    },
  },
});

/** A heartbeat's answer: the connector and how many devices it reported. */
TELEMETRY_SCHEMAS.ConnectorHeartbeat = {
  ...TELEMETRY_SCHEMAS.Connector,
  required: [...(TELEMETRY_SCHEMAS.Connector as { required: string[] }).required, 'devices_synced'],
  properties: {
    ...(TELEMETRY_SCHEMAS.Connector as { properties: Json }).properties,
    devices_synced: { type: 'integer', minimum: 0, description: 'devices of this heartbeat registered or updated' },
  },
};

for (const name of ['EnvironmentalPoint', 'Device', 'Result', 'ResultChart', 'Connector', 'ConnectorHeartbeat', 'ReadingsIngested']) {
  TELEMETRY_SCHEMAS[`${name}Item`] = closed({ data: ref(name) });
}
for (const name of ['EnvironmentalPoint', 'EnvironmentalReading', 'Device', 'Result', 'Connector']) {
  TELEMETRY_SCHEMAS[`${name}List`] = closed({ data: { type: 'array', items: ref(name) }, pagination: ref('Pagination') });
}

/** The answer schema of each telemetry operation that answers a typed body. */
export const TELEMETRY_ANSWERS: Record<string, string> = {
  listPoints: 'EnvironmentalPointList',
  adminListPoints: 'EnvironmentalPointList',
  createPoint: 'EnvironmentalPointItem',
  updatePoint: 'EnvironmentalPointItem',
  listReadings: 'EnvironmentalReadingList',
  ingestReadings: 'ReadingsIngestedItem',
  registerDevice: 'DeviceItem',
  listDevices: 'DeviceList',
  ingestResult: 'ResultItem',
  listResults: 'ResultList',
  getResult: 'ResultItem',
  getResultChart: 'ResultChartItem',
  connectorHeartbeat: 'ConnectorHeartbeatItem',
  listConnectors: 'ConnectorList',
  getConnector: 'ConnectorItem',
};
