import { orders } from '@lab/contracts';
import type { GrpcServer } from '@lab/kit';
import { createOrder, getOrder, listOrders, type OrdersDeps } from './orders.js';
import { listResults, recordResult, releaseResult, type ResultCaps } from './results.js';

export function registerHandlers(server: GrpcServer, deps: OrdersDeps, caps: ResultCaps): void {
  server.add(orders.OrdersServiceService, {
    createOrder: async (req, caller) => ({ order: await createOrder(deps, caller, req.body) }),
    listOrders: (req, caller) => listOrders(deps, caller, req.query),
    getOrder: async (req, caller) => ({ order: await getOrder(deps, caller, req.id) }),
    recordResult: (req, caller) => recordResult(deps, caller, req.order_id, req.body),
    releaseResult: (req, caller) => releaseResult(deps, caller, req.order_id, req.result_id),
    listResults: async (req, caller) => listResults(deps, caller, req.query, caps),
  });
}
