import { orders } from '@lab/contracts';
import { jsonAnswer, type GrpcServer } from '@lab/kit';
import { createOrder, getOrder, listOrders, type OrdersDeps } from './orders.js';
import { listResults, recordResult, releaseResult, type ResultCaps } from './results.js';

export function registerHandlers(server: GrpcServer, deps: OrdersDeps, caps: ResultCaps): void {
  server.add(orders.OrdersServiceService, {
    createOrder: async (req, caller) => ({ json: await createOrder(deps, caller, req.json) }),
    listOrders: async (req, caller) => ({ ...(await listOrders(deps, caller, req.query)), capped: false, sample_lookup_capped: false, warnings: [] }),
    getOrder: async (req, caller) => ({ json: await getOrder(deps, caller, req.id) }),
    recordResult: async (req, caller) => jsonAnswer(await recordResult(deps, caller, req.order_id, req.json)),
    releaseResult: async (req, caller) => jsonAnswer(await releaseResult(deps, caller, req.order_id, req.result_id)),
    listResults: async (req, caller) => listResults(deps, caller, req.query, caps),
  });
}
