/**
 * The operations a route's handler names (`{kind, op}` in the route table): one
 * union per kind of handler, so the table, the document and the gateway's
 * handlers agree on every name.
 */

/** Generic CRUD of a record resource. */
export type RecordOp = 'list' | 'get' | 'create' | 'update' | 'replace' | 'delete';

/** The experiment routes beyond generic CRUD: amendments, versions and signatures of signed records. */
export type ExperimentOp = 'amend' | 'versions' | 'signatures';

/** Calendar feeds of equipment: the caller's feed tokens, and the feed a token reads (decision 060). */
export type CalendarOp = 'create_feed' | 'list_feeds' | 'revoke_feed' | 'feed';

/** Lab orders and lab results (module sample_intake), served by the orders service. */
export type LabOrderOp = 'create' | 'list' | 'get' | 'record_result' | 'release_result' | 'list_results';

/** Operations of the telemetry service behind /v1 (module analytics_qc). */
export type TelemetryOp =
  | 'listPoints'
  | 'ingestReadings'
  | 'listReadings'
  | 'registerDevice'
  | 'listDevices'
  | 'deleteDevice'
  | 'ingestResult'
  | 'listResults'
  | 'getResult'
  | 'getResultChart'
  | 'connectorHeartbeat'
  | 'listConnectors'
  | 'getConnector'
  | 'deleteConnector';

/** Management of environmental points (operator token). */
export type TelemetryAdminOp = 'createPoint' | 'updatePoint' | 'adminListPoints' | 'deletePoint';

/** The management API of identity's organisations, users, members, tokens and OAuth clients (operator token). */
export type AdminAction =
  | 'createOrg'
  | 'updateOrg'
  | 'createDepartment'
  | 'createUser'
  | 'putMember'
  | 'deleteMember'
  | 'createApiKey'
  | 'createPat'
  | 'revokeToken'
  | 'createOAuthClient'
  | 'listOrgs'
  | 'getOrg'
  | 'listDepartments'
  | 'deleteDepartment'
  | 'listUsers'
  | 'getUser'
  | 'listMembers'
  | 'listApiKeys'
  | 'listPats'
  | 'listOAuthClients'
  | 'getOAuthClient'
  | 'deleteOAuthClient';

/** Management operations of the webhooks service (operator token). */
export type WebhooksAdminAction =
  | 'createSubscription'
  | 'listSubscriptions'
  | 'getSubscription'
  | 'updateSubscription'
  | 'deleteSubscription'
  | 'rotateSubscriptionSecret'
  | 'listDeliveries'
  | 'redeliver'
  | 'createInboundEndpoint'
  | 'listInboundEndpoints'
  | 'getInboundEndpoint'
  | 'updateInboundEndpoint'
  | 'deleteInboundEndpoint'
  | 'rotateInboundSecret';
